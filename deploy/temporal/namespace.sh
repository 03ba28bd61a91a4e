#!/bin/sh
# Creates supportflow's Temporal namespace if it does not exist and
# registers the search attributes its workflows set (supportflow.go's
# SearchAttributes; internal/deploy's tests check the two agree). Run by
# docker-compose.yml's temporal-setup service with the temporal CLI, which
# reads TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE and the TEMPORAL_TLS_*
# variables (https://docs.temporal.io/references/client-environment-configuration).
# Repeating it changes nothing. On Temporal Cloud, namespaces and search
# attributes are created with tcld or the Cloud UI instead.
set -eu

namespace=${TEMPORAL_NAMESPACE:-default}
retention=${SUPPORTFLOW_NAMESPACE_RETENTION:-720h}

# retry CMD...: the frontend answers before a new namespace is usable
# everywhere, so each step is tried for up to two minutes.
retry() {
	i=0
	until "$@"; do
		i=$((i + 1))
		if [ "$i" -ge 60 ]; then
			echo "namespace.sh: gave up on: $*" >&2
			return 1
		fi
		sleep 2
	done
}

has_search_attribute() {
	temporal operator search-attribute list --namespace "$namespace" | grep -qw "$1"
}

ensure_namespace() {
	temporal operator namespace describe --namespace "$namespace" >/dev/null 2>&1 ||
		temporal operator namespace create --namespace "$namespace" --retention "$retention"
}

ensure_search_attribute() {
	has_search_attribute "$1" ||
		temporal operator search-attribute create --namespace "$namespace" --name "$1" --type "$2"
}

retry temporal operator cluster health
retry ensure_namespace
retry ensure_search_attribute SupportflowState Keyword
retry ensure_search_attribute SupportflowTicketID Keyword
retry ensure_search_attribute SupportflowProposalID Keyword
echo "namespace $namespace and its search attributes are in place"

#!/bin/sh
# Creates supportflow's and Temporal's PostgreSQL roles and databases, each
# role owning its own databases and unable to connect to the other's.
#
# The postgres image runs /docker-entrypoint-initdb.d/*.sh once, when the
# data directory is first initialised, as the superuser, against a server
# listening on its socket only (https://hub.docker.com/_/postgres,
# "Initialization scripts"). It runs an executable script and sources any
# other, so this one neither sets shell options nor exits: a failing
# command fails the entrypoint either way.
#
# The passwords come from the compose secrets: the temporal role's as a
# plain file, the supportflow role's from the pgpass line its
# DATABASE_URL's passfile names (HOST:PORT:DATABASE:USER:PASSWORD; the
# password is everything after the fourth colon, so use one without a colon
# or backslash, e.g. `openssl rand -hex 24`).

temporal_password="$(cat /run/secrets/temporal-db-password)"
supportflow_password="$(grep -v '^#' /run/secrets/supportflow.pgpass | head -n 1 | cut -d: -f5-)"

if [ -z "$temporal_password" ] || [ -z "$supportflow_password" ]; then
	echo "10-roles.sh: deploy/secrets/temporal-db-password and deploy/secrets/supportflow.pgpass must hold the roles' passwords" >&2
	false
else
	psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres \
		--set=temporal_password="$temporal_password" \
		--set=supportflow_password="$supportflow_password" <<'SQL'
CREATE ROLE temporal LOGIN PASSWORD :'temporal_password';
CREATE DATABASE temporal OWNER temporal;
CREATE DATABASE temporal_visibility OWNER temporal;

CREATE ROLE supportflow LOGIN PASSWORD :'supportflow_password';
CREATE DATABASE supportflow OWNER supportflow;

-- Owners keep CONNECT on their own databases; nobody else gets it.
REVOKE CONNECT ON DATABASE temporal, temporal_visibility, supportflow FROM PUBLIC;

-- Temporal's visibility schema needs btree_gin; created here by the
-- superuser so the schema tool, running as temporal, finds it.
\connect temporal_visibility
CREATE EXTENSION IF NOT EXISTS btree_gin;
SQL
fi

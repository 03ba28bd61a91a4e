#!/bin/sh
# Creates or upgrades Temporal's schemas (the temporal and
# temporal_visibility databases, which deploy/postgres/initdb/10-roles.sh
# created) to the versions this admin-tools image carries, as the temporal
# role. Run by docker-compose.yml's temporal-schema service before every
# start of the server; repeating it changes nothing once the schemas are
# current. The steps are Temporal's own for PostgreSQL:
# https://github.com/temporalio/samples-server/blob/main/compose/scripts/setup-postgres.sh
set -eu

: "${POSTGRES_SEEDS:?}" "${POSTGRES_USER:?}" "${TEMPORAL_DB_PASSWORD_FILE:?}"
SQL_PASSWORD="$(cat "$TEMPORAL_DB_PASSWORD_FILE")"
export SQL_PASSWORD

schemas=/etc/temporal/schema/postgresql/v12
for pair in temporal:temporal temporal_visibility:visibility; do
	db=${pair%%:*}
	dir=${pair#*:}
	temporal-sql-tool --plugin postgres12 --ep "$POSTGRES_SEEDS" -p "${DB_PORT:-5432}" -u "$POSTGRES_USER" --db "$db" setup-schema -v 0.0
	temporal-sql-tool --plugin postgres12 --ep "$POSTGRES_SEEDS" -p "${DB_PORT:-5432}" -u "$POSTGRES_USER" --db "$db" update-schema -d "$schemas/$dir/versioned"
done
echo "Temporal schemas are current"

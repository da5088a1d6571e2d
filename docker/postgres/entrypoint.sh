#!/bin/sh
# First start: initdb with a password for POSTGRES_USER (scram), create POSTGRES_DB, listen on all
# addresses, password auth for every TCP connection. Later starts: just the server.
set -eu
: "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD must be set (see .env.example)}"
POSTGRES_USER=${POSTGRES_USER:-postgres}
POSTGRES_DB=${POSTGRES_DB:-$POSTGRES_USER}
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    pwfile=$(mktemp)
    printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
    initdb --username="$POSTGRES_USER" --pwfile="$pwfile" --auth-local=trust --auth-host=scram-sha-256 \
        --encoding=UTF8 --locale=C.UTF-8 -D "$PGDATA" > /dev/null
    rm -f "$pwfile"
    echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
    pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start > /dev/null
    if [ "$POSTGRES_DB" != "postgres" ]; then
        psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres \
            -c "CREATE DATABASE \"$POSTGRES_DB\" OWNER \"$POSTGRES_USER\""
    fi
    pg_ctl -D "$PGDATA" -m fast -w stop > /dev/null
    echo "pg-entrypoint: initialised $PGDATA (user $POSTGRES_USER, database $POSTGRES_DB)"
fi
if [ "${1:-postgres}" = "postgres" ]; then
    shift || true
    exec postgres -D "$PGDATA" -c listen_addresses='*' "$@"
fi
exec "$@"

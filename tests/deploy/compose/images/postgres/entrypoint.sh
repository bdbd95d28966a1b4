#!/bin/sh
# The official image's entrypoint, for what compose asks of it: the first start makes the
# cluster, with POSTGRES_USER as its superuser, the password from POSTGRES_PASSWORD_FILE and the
# database POSTGRES_DB, reached from other containers with that password (scram-sha-256) and
# without one only over the container's own socket (the health check's pg_isready).
set -eu
bin=/usr/lib/postgresql/15/bin
if [ "$(id -u)" = 0 ]; then
  install -d -o postgres -g postgres -m 700 "$PGDATA"
  install -d -o postgres -g postgres /run/postgresql
  exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  "$bin/initdb" --pgdata="$PGDATA" --username="$POSTGRES_USER" --pwfile="$POSTGRES_PASSWORD_FILE" \
    --auth-local=trust --auth-host=scram-sha-256 --encoding=UTF8 --locale=C.UTF-8 >/dev/null
  echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  "$bin/pg_ctl" --pgdata="$PGDATA" --options="-c listen_addresses=''" --wait start >/dev/null
  # From stdin: psql quotes a variable (:"db") there, never in --command.
  echo 'CREATE DATABASE :"db"' | "$bin/psql" --no-psqlrc --set=ON_ERROR_STOP=1 \
    --username="$POSTGRES_USER" --dbname=postgres --set=db="$POSTGRES_DB" >/dev/null
  "$bin/pg_ctl" --pgdata="$PGDATA" --mode=fast --wait stop >/dev/null
fi
exec "$bin/postgres" -D "$PGDATA" -c listen_addresses='*' "$@"

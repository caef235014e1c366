#!/usr/bin/env bash
# Sets up this machine (scripts/setup.sh), builds and installs snowflake_id in
# release mode, starts a throwaway PostgreSQL with the library preloaded and a
# worker id, and shows it working. Safe to run again: the demo server is
# replaced. Stop it with: sudo -u postgres pg_ctl -D /tmp/snowflake_id-demo/data stop
set -euo pipefail
cd "$(dirname "$0")/.."

SNOWFLAKE_OTHER_MAJORS="" scripts/setup.sh  # the system PostgreSQL is all this needs
export PATH="$HOME/.cargo/bin:$PATH"
export LC_ALL=C.UTF-8  # initdb: UTF-8 whatever locale root has, or lacks
. scripts/versions.sh
pgrx_flags
PG_BIN=/usr/lib/postgresql/15/bin
DEMO="${SNOWFLAKE_DEMO_DIR:-/tmp/snowflake_id-demo}"
PORT="${SNOWFLAKE_DEMO_PORT:-5499}"

printf '\n==> Building and installing snowflake_id (release)\n'
cargo pgrx install --release --pg-config "$PG_BIN/pg_config"

printf '\n==> Starting a throwaway server in %s on port %s\n' "$DEMO" "$PORT"
if [[ -f "$DEMO/data/postmaster.pid" ]]; then
    sudo -u postgres "$PG_BIN/pg_ctl" -D "$DEMO/data" -m fast -w stop || true
fi
rm -rf "$DEMO"
mkdir -p "$DEMO"
chown postgres "$DEMO"
sudo -u postgres "$PG_BIN/initdb" -D "$DEMO/data" -A trust -U postgres >/dev/null
cat >>"$DEMO/data/postgresql.conf" <<CONF
port = $PORT
listen_addresses = ''
unix_socket_directories = '$DEMO'
shared_preload_libraries = 'snowflake_id'
snowflake_id.worker_id = 1
CONF
sudo -u postgres "$PG_BIN/pg_ctl" -D "$DEMO/data" -l "$DEMO/server.log" -w start >/dev/null

printf '\n==> The extension at work\n'
"$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$DEMO" -p "$PORT" -U postgres -d postgres -f scripts/demo.sql

cat <<DONE

The demo server keeps running. Connect:  psql -h $DEMO -p $PORT -U postgres
Stop it:                                 sudo -u postgres $PG_BIN/pg_ctl -D $DEMO/data stop
DONE

#!/usr/bin/env bash
# `make cluster`: a three-broker Weir cluster on this machine, as it runs in production but
# small: one private PostgreSQL (metadata, coordination), one s3s-fs (an S3-protocol server on a
# local directory) and three `weir serve` processes that differ only in node id, ports and data
# directory. Prints the bootstrap servers; Ctrl-C stops everything and removes the state.
#
# Needs: PostgreSQL's initdb/pg_ctl (PG_BIN, default /usr/lib/postgresql/15/bin), s3s-fs
# (`cargo install s3s-fs@0.14.1 --features binary --locked`), a built weir (WEIR_BIN).
# Ports: Kafka 19092-19094, admin 19644-19646, PostgreSQL 15432, S3 19000 (override with
# BASE_PORT, PG_PORT, S3_PORT).
set -euo pipefail

WEIR_BIN=${WEIR_BIN:-target/release/weir}
PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
S3S_FS=${S3S_FS:-$(command -v s3s-fs || echo "$HOME/.cargo/bin/s3s-fs")}
BASE_PORT=${BASE_PORT:-19092}
ADMIN_BASE=${ADMIN_BASE:-19644}
PG_PORT=${PG_PORT:-15432}
S3_PORT=${S3_PORT:-19000}
BROKERS=${BROKERS:-3}
ROOT=$(mktemp -d /tmp/weir-cluster.XXXXXX)
chmod 755 "$ROOT"

as_pg() {
    # initdb refuses to run as root: run PostgreSQL as the postgres user then.
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

pids=()
S3_PID=
cleaned=
cleanup() {
    [ -n "$cleaned" ] && return
    cleaned=1
    echo
    echo "stopping brokers (controlled shutdown), then S3 and PostgreSQL..."
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do
        while kill -0 "$p" 2>/dev/null; do sleep 0.2; done
    done
    [ -n "$S3_PID" ] && kill "$S3_PID" 2>/dev/null || true
    as_pg "$PG_BIN/pg_ctl" -D "$ROOT/pg" -m fast stop >/dev/null 2>&1 || true
    rm -rf "$ROOT"
}
trap cleanup EXIT INT TERM

mkdir -p "$ROOT/pg" "$ROOT/s3/weir"
[ "$(id -u)" = 0 ] && chown postgres "$ROOT/pg"
as_pg "$PG_BIN/initdb" -D "$ROOT/pg" -A trust -U weir >"$ROOT/initdb.log"
as_pg "$PG_BIN/pg_ctl" -D "$ROOT/pg" -l "$ROOT/pg/log" -w \
    -o "-p $PG_PORT -k $ROOT/pg -c listen_addresses=127.0.0.1" start >/dev/null
"$PG_BIN/createdb" -h 127.0.0.1 -p "$PG_PORT" -U weir weir 2>/dev/null || true

setsid "$S3S_FS" --host 127.0.0.1 --port "$S3_PORT" --access-key weir --secret-key weirsecret \
    "$ROOT/s3" >"$ROOT/s3.log" 2>&1 &
S3_PID=$!

export AWS_ENDPOINT="http://127.0.0.1:$S3_PORT" AWS_ALLOW_HTTP=true AWS_REGION=us-east-1 \
    AWS_ACCESS_KEY_ID=weir AWS_SECRET_ACCESS_KEY=weirsecret \
    AWS_VIRTUAL_HOSTED_STYLE_REQUEST=false
bootstrap=()
for i in $(seq 1 "$BROKERS"); do
    port=$((BASE_PORT + i - 1))
    admin=$((ADMIN_BASE + i - 1))
    mkdir -p "$ROOT/node-$i"
    WEIR_WAL_CAPACITY=${WEIR_WAL_CAPACITY:-268435456} setsid "$WEIR_BIN" serve \
        --node-id "$i" \
        --listen "127.0.0.1:$port" --advertised "127.0.0.1:$port" \
        --admin-listen "127.0.0.1:$admin" \
        --data-dir "$ROOT/node-$i" \
        --metadata-url "postgres://weir@127.0.0.1:$PG_PORT/weir" \
        --object-store-url "s3://weir/cluster" >"$ROOT/node-$i.log" 2>&1 &
    pids+=($!)
    bootstrap+=("127.0.0.1:$port")
done
for i in $(seq 1 "$BROKERS"); do
    admin=$((ADMIN_BASE + i - 1))
    for _ in $(seq 1 100); do
        curl -sf "http://127.0.0.1:$admin/readyz" >/dev/null 2>&1 && break
        sleep 0.1
    done
done
echo "Weir cluster of $BROKERS brokers is up (state in $ROOT, logs node-N.log)."
echo "  bootstrap servers: $(IFS=,; echo "${bootstrap[*]}")"
echo "  admin API:         http://127.0.0.1:$ADMIN_BASE/v1/cluster (and /v1/partitions)"
echo "  metadata:          postgres://weir@127.0.0.1:$PG_PORT/weir"
echo "Ctrl-C stops it."
# Children run in their own sessions, so that a Ctrl-C reaches only this script, which stops
# the brokers first (they upload what their WALs hold) and the stores after them.
while true; do sleep 1; done

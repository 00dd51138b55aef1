#!/usr/bin/env bash
# Weir against Apache Kafka 4.1 on this machine, with the same load generator (`weir perf`).
#
#   bench/run.sh            (or: make bench)
#
# Starts a single-node Kafka (tools/kafka/kafka.sh), runs the workloads, stops it; then the same
# for `weir serve`. Each workload gets a freshly started broker on an empty data dir; both
# brokers' data dirs are on the same disk (under BENCH_DIR).
#
#   (b) maximum throughput, 1 KiB records, acks=all          (first: it sets the rates of a, c)
#   (a) 1 KiB records at half of Kafka's (b) rate, acks=all, linger.ms=1
#   (c) 64 KiB records at half of Kafka's (b) MiB/s
#   (d) catch-up: produce BENCH_D_MIB MiB/s for BENCH_BACKLOG with no consumer, then read
#       from the earliest offset while producing goes on
#
# Writes bench/results/YYYY-MM-DD-HHMM.md (table + machine description) and the JSON of every
# run in bench/results/YYYY-MM-DD-HHMM/, and prints the table.
#
# Environment (defaults in brackets):
#   BENCH_WARMUP [10s]  BENCH_DURATION [45s]       warm-up and measurement of a, b, c (and d)
#   BENCH_BACKLOG [60s] BENCH_D_MIB [40]           (d): backlog = BENCH_D_MIB x BENCH_BACKLOG
#   BENCH_D_DURATION [60s]                         (d): measured time after consumers start
#   BENCH_PARTITIONS [16]                          partitions of the one topic
#   BENCH_A_RATE, BENCH_C_RATE                     records/s of (a), (c): skip the derivation
#   BENCH_BROKERS ["kafka weir"]  BENCH_WORKLOADS ["b a c d"]
#   BENCH_DIR [target/bench-run]                   data dirs and logs
#   BENCH_RESULTS [bench/results]                  where the table and JSON go
#   BENCH_CHARTS [0]                               1: an SVG chart per run next to the JSON
#   BENCH_NO_BUILD [0]                             1: use target/release/weir as it is
#   BENCH_KEEP_DATA [0]                            1: keep the last data dir of each broker
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WARMUP=${BENCH_WARMUP:-10s}
DURATION=${BENCH_DURATION:-45s}
BACKLOG=${BENCH_BACKLOG:-60s}
D_MIB=${BENCH_D_MIB:-40}
D_DURATION=${BENCH_D_DURATION:-60s}
PARTITIONS=${BENCH_PARTITIONS:-16}
BROKERS=${BENCH_BROKERS:-kafka weir}
WORKLOADS=${BENCH_WORKLOADS:-b a c d}
WORK=${BENCH_DIR:-$ROOT/target/bench-run}
CHARTS=${BENCH_CHARTS:-0}
# Fallback rates when Kafka's (b) is not run (BENCH_BROKERS=weir) or failed.
FALLBACK_A_RATE=50000
FALLBACK_C_RATE=800

KAFKA=$ROOT/tools/kafka/kafka.sh
WEIR=$ROOT/target/release/weir
KAFKA_PORT=19192
KAFKA_CONTROLLER_PORT=19193
WEIR_PORT=19292
WEIR_ADMIN_PORT=19293

STAMP=$(date +%Y-%m-%d-%H%M)
RESULTS=${BENCH_RESULTS:-$ROOT/bench/results}
OUT=$RESULTS/$STAMP
mkdir -p "$OUT" "$WORK"

log() { echo "bench: $*" >&2; }
die() { log "error: $*"; exit 1; }

# ---------------------------------------------------------------- brokers

WEIR_PID=
KAFKA_UP=
stop_weir() {
  [[ -n $WEIR_PID ]] || return 0
  kill -TERM "$WEIR_PID" 2>/dev/null || true
  for _ in $(seq 1 120); do
    kill -0 "$WEIR_PID" 2>/dev/null || break
    sleep 0.5
  done
  if kill -0 "$WEIR_PID" 2>/dev/null; then
    log "weir did not stop in 60 s after SIGTERM; SIGKILL"
    kill -KILL "$WEIR_PID" 2>/dev/null || true
  fi
  wait "$WEIR_PID" 2>/dev/null || true
  WEIR_PID=
}
stop_kafka() {
  [[ -n $KAFKA_UP ]] || return 0
  "$KAFKA" stop --data-dir "$WORK/kafka" >/dev/null || true
  KAFKA_UP=
}
cleanup() { stop_weir; stop_kafka; }
trap cleanup EXIT
trap 'exit 130' INT TERM

BOOTSTRAP=
start_broker() { # broker; sets BOOTSTRAP (not in a subshell: it records pids)
  local broker=$1
  case $broker in
    kafka)
      rm -rf "$WORK/kafka"
      "$KAFKA" start --data-dir "$WORK/kafka" --port $KAFKA_PORT \
        --controller-port $KAFKA_CONTROLLER_PORT >/dev/null
      KAFKA_UP=1
      BOOTSTRAP=127.0.0.1:$KAFKA_PORT
      ;;
    weir)
      rm -rf "$WORK/weir"
      mkdir -p "$WORK/weir"
      "$WEIR" serve --data-dir "$WORK/weir" --listen "127.0.0.1:$WEIR_PORT" \
        --admin-listen "127.0.0.1:$WEIR_ADMIN_PORT" >"$WORK/weir.log" 2>&1 &
      WEIR_PID=$!
      local ok=
      for _ in $(seq 1 120); do
        if curl -fs -o /dev/null "http://127.0.0.1:$WEIR_ADMIN_PORT/readyz"; then ok=1; break; fi
        kill -0 "$WEIR_PID" 2>/dev/null || break
        sleep 0.5
      done
      [[ -n $ok ]] || { tail -n 30 "$WORK/weir.log" >&2; die "weir did not become ready"; }
      BOOTSTRAP=127.0.0.1:$WEIR_PORT
      ;;
    *) die "unknown broker $broker" ;;
  esac
}

stop_broker() { # broker workload
  case $1 in
    kafka)
      stop_kafka
      cp "$WORK/kafka/kafka.log" "$WORK/kafka-$2.broker.log" 2>/dev/null || true
      ;;
    weir)
      curl -fs "http://127.0.0.1:$WEIR_ADMIN_PORT/metrics" >"$WORK/weir-$2.metrics" || true
      stop_weir
      cp "$WORK/weir.log" "$WORK/weir-$2.broker.log" 2>/dev/null || true
      ;;
  esac
  [[ ${BENCH_KEEP_DATA:-0} == 1 ]] || rm -rf "${WORK:?}/$1"
}

# ---------------------------------------------------------------- workloads

json_field() { # file python-expression-on-d
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1" 2>/dev/null
}

A_RATE=${BENCH_A_RATE:-}
C_RATE=${BENCH_C_RATE:-}

workload_args() { # workload -> perf flags
  local common=(--partitions "$PARTITIONS" --producers 1 --groups 1 --consumers 1
    --producer-config acks=all --producer-config linger.ms=1 --quiet --delete-topics)
  case $1 in
    a) echo "${common[@]} --record-size 1024 --rate ${A_RATE:-$FALLBACK_A_RATE} --warmup $WARMUP --duration $DURATION" ;;
    b) echo "${common[@]} --record-size 1024 --rate 0 --warmup $WARMUP --duration $DURATION" ;;
    c) echo "${common[@]} --record-size 65536 --rate ${C_RATE:-$FALLBACK_C_RATE} --warmup $WARMUP --duration $DURATION" ;;
    d) echo "${common[@]} --record-size 1024 --throughput-mib $D_MIB --warmup $WARMUP --backlog $BACKLOG --duration $D_DURATION" ;;
  esac
}

run_workload() { # broker workload
  local broker=$1 w=$2 args json=$OUT/$1-$2.json
  args=$(workload_args "$w")
  start_broker "$broker"
  local chart=()
  [[ $CHARTS == 1 ]] && chart=(--chart "$OUT/$broker-$w.svg")
  log "$broker ($w): weir perf --bootstrap-servers $BOOTSTRAP $args"
  local t0=$SECONDS rc=0
  # shellcheck disable=SC2086
  "$WEIR" perf --bootstrap-servers "$BOOTSTRAP" $args --output "$json" "${chart[@]}" \
    2>&1 | tee "$WORK/$broker-$w.log" || rc=$?
  if [[ $broker == weir ]] && ! kill -0 "$WEIR_PID" 2>/dev/null; then
    log "weir is not running any more after ($w); end of its log:"
    tail -n 30 "$WORK/weir.log" >&2
    rc=1
  fi
  stop_broker "$broker" "$w"
  log "$broker ($w): $((SECONDS - t0)) s, exit $rc"
  echo "$broker $w $args" >>"$OUT/commands.txt"
  [[ $rc == 0 ]] || echo "$broker $w failed (exit $rc)" >>"$OUT/failures.txt"
}

# ---------------------------------------------------------------- main

T_START=$SECONDS
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
if [[ ${BENCH_NO_BUILD:-0} != 1 ]]; then
  log "building weir (release)"
  (cd "$ROOT" && cargo build --release -p weir)
fi
[[ -x $WEIR ]] || die "$WEIR not found"
[[ $BROKERS == *kafka* ]] && "$KAFKA" install
: >"$OUT/commands.txt"

for broker in $BROKERS; do
  for w in $WORKLOADS; do
    run_workload "$broker" "$w"
    if [[ $broker == kafka && $w == b && -f $OUT/kafka-b.json ]]; then
      rps=$(json_field "$OUT/kafka-b.json" "d['summary']['produce']['records_per_sec']" || true)
      if [[ -n $rps ]] && python3 -c "import sys; sys.exit(0 if float('$rps') > 0 else 1)"; then
        [[ -n $A_RATE ]] || A_RATE=$(python3 -c "print(int(float('$rps') / 2))")
        [[ -n $C_RATE ]] || C_RATE=$(python3 -c "print(max(1, int(float('$rps') * 1024 / 65536 / 2)))")
        log "Kafka's maximum: $rps records/s; (a) at $A_RATE records/s, (c) at $C_RATE records/s"
      fi
    fi
  done
done

LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
ELAPSED=$((SECONDS - T_START))

# Machine description for the report.
disk_dev=$(df --output=source "$WORK" | tail -1)
disk_fs=$(df --output=fstype "$WORK" | tail -1)
disk_base=$(basename "$disk_dev")
rot=$(cat "/sys/block/$disk_base/queue/rotational" 2>/dev/null || echo "?")
cat >"$OUT/machine.txt" <<EOF
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
cores=$(nproc)
memory=$(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)
disk=$disk_dev ($disk_fs, $( [[ $rot == 0 ]] && echo SSD/virtual || { [[ $rot == 1 ]] && echo "rotational (as reported; virtual disk)" || echo "type unknown"; } ), $(lsblk -dno SIZE "$disk_dev" 2>/dev/null | head -1 | tr -d ' ')); data dirs under $WORK
kernel=$(uname -sr)
os=$(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")
weir=$(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null)$(cd "$ROOT" && git diff --quiet HEAD 2>/dev/null || echo "+local changes")
kafka=4.1.2 ($(java -version 2>&1 | head -1), heap 1 GiB, G1)
rustc=$(rustc --version)
librdkafka=$(json_field "$(ls "$OUT"/*.json | head -1)" "d['librdkafka']" || echo "?")
load=$LOAD_BEFORE before, $LOAD_AFTER after (1/5/15 min load averages)
elapsed=$ELAPSED s
EOF

python3 "$ROOT/bench/report.py" "$OUT" "$RESULTS/$STAMP.md"
log "written: $RESULTS/$STAMP.md and $RESULTS/$STAMP/ ($ELAPSED s)"

#!/usr/bin/env bash
# Weir against Apache Kafka (4.4; WEIR_KAFKA_VERSION=4.1.2 for the earlier baseline) on this machine, with the same load generator (`weir perf`).
#
#   bench/run.sh            (or: make bench)
#
# Starts a single-node Kafka (tools/kafka/kafka.sh), runs the workloads, stops it; then the same
# for each of the other broker kinds:
#
#   kafka     Apache Kafka 4.4, single node
#   weir      `weir serve` with its objects in a local directory (file://, the default)
#   weir-s3   `weir serve` with its objects on a real S3-protocol server: s3s-fs
#             (cargo install s3s-fs@0.14.1 --features binary --locked), started on 127.0.0.1:19294
#             with its root under /dev/shm when that has 16 GiB free (S3 is across the network in
#             production and does not share the broker's disk), else under BENCH_DIR; it runs
#             the workloads of BENCH_S3_WORKLOADS only
#
# Each workload gets a freshly started broker on an empty data dir (and for weir-s3 an empty
# s3s-fs root); the brokers' data dirs are on the same disk (under BENCH_DIR).
#
#   (b) maximum throughput, 1 KiB records, acks=all          (first: it sets the rates of a, c)
#   (p) maximum produce throughput, producer only, 1 KiB records, acks=all, linger.ms=1
#   (a) 1 KiB records at half of Kafka's (b) rate, acks=all, linger.ms=1
#   (c) 64 KiB records at half of Kafka's (b) MiB/s
#   (d) catch-up: produce BENCH_D_MIB MiB/s for BENCH_BACKLOG with no consumer, then read
#       from the earliest offset while producing goes on
#
# Writes bench/results/YYYY-MM-DD-HHMM.md (tables + machine description) and the JSON of every
# run in bench/results/YYYY-MM-DD-HHMM/, and prints the table. Next to the JSON: each broker's
# CPU ticks and resident memory, sampled every second (BROKER-W.proc; the table's CPU and RSS
# rows come from them), Weir's /metrics
# at the end of each workload (BROKER-W.metrics; the "Object storage requests" table comes from
# them), `weir cost` over 20 s of weir-s3's (a) (weir-s3-a.cost.txt), and `weir cost` of AutoMQ's
# comparison workload, 1 GiB/s in and out, 3 days retention (cost-automq.txt).
#
# Environment (defaults in brackets):
#   BENCH_WARMUP [10s]  BENCH_DURATION [45s]       warm-up and measurement of a, b, c (and d)
#   BENCH_BACKLOG [60s] BENCH_D_MIB [40]           (d): backlog = BENCH_D_MIB x BENCH_BACKLOG
#   BENCH_D_DURATION [60s]                         (d): measured time after consumers start
#   BENCH_PARTITIONS [16]                          partitions of the one topic
#   BENCH_A_RATE, BENCH_C_RATE                     records/s of (a), (c): skip the derivation
#   BENCH_BROKERS ["kafka weir weir-s3"]  BENCH_WORKLOADS ["b p a c d"]
#   BENCH_S3_WORKLOADS ["a d"]                     the workloads weir-s3 runs (of BENCH_WORKLOADS)
#   BENCH_S3_DIR [/dev/shm/weir-bench-s3 if /dev/shm has 16 GiB free, else BENCH_DIR/s3]
#                                                  root of s3s-fs; emptied for every workload
#   S3S_FS [~/.cargo/bin/s3s-fs, else s3s-fs on PATH]
#   BENCH_DIR [target/bench-run]                   data dirs and logs
#   BENCH_RESULTS [bench/results]                  where the table and JSON go
#   BENCH_CHARTS [0]                               1: an SVG chart per run next to the JSON
#   BENCH_NO_BUILD [0]                             1: use target/release/weir as it is
#   BENCH_SERVE_BIN [target/release/weir]          the broker's binary (another build's, to
#                                                  compare builds); the load generator, `weir
#                                                  perf` and `weir cost` stay target/release/weir's
#   BENCH_OBJECT_WAL [1]                           0: leave out the object WAL's section
#                                                  (bench/object_wal.py, BENCH_OW_* settings)
#   BENCH_PRODUCER_PERF [1]                        0: leave out the ProducerPerformance section
#                                                  (bench/producer_perf.py, BENCH_PP_* settings)
#   BENCH_OMB [1]                                  0: leave out the OpenMessaging Benchmark
#                                                  workloads (bench/omb.py, BENCH_OMB_* settings)
#   BENCH_TLS [1]                                  0: leave out the TLS section: SASL_SSL beside
#                                                  PLAINTEXT (bench/tls.py, BENCH_TLS_* settings)
#   BENCH_SCHEMA_VALIDATION [1]                    0: leave out the schema validation section:
#                                                  produce with and without it (Weir only;
#                                                  bench/schema_validation.py, BENCH_SV_*)
#   BENCH_MANY_PARTITIONS [1]                      0: leave out the many-partitions section
#                                                  (bench/partitions.py, BENCH_P_* settings)
#   BENCH_ZONES [1]                                0: leave out the zones section
#                                                  (bench/zones.py, BENCH_Z_* settings)
#   BENCH_PIN [0]                                  1: equal hardware for the brokers: each broker
#                                                  on the cores BENCH_BROKER_CPUS [1] only, the
#                                                  load generator and s3s-fs on BENCH_CLIENT_CPUS
#                                                  [0] (taskset); 0: everything shares all cores
#   BENCH_KEEP_DATA [0]                            1: keep the last data dir of each broker
#                                                  (and the s3s-fs root)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WARMUP=${BENCH_WARMUP:-10s}
DURATION=${BENCH_DURATION:-45s}
BACKLOG=${BENCH_BACKLOG:-60s}
D_MIB=${BENCH_D_MIB:-40}
D_DURATION=${BENCH_D_DURATION:-60s}
PARTITIONS=${BENCH_PARTITIONS:-16}
BROKERS=${BENCH_BROKERS:-kafka weir weir-s3}
WORKLOADS=${BENCH_WORKLOADS:-b p a c d}
S3_WORKLOADS=${BENCH_S3_WORKLOADS:-a d}
WORK=${BENCH_DIR:-$ROOT/target/bench-run}
CHARTS=${BENCH_CHARTS:-0}
PIN=${BENCH_PIN:-0}
BROKER_CPUS=${BENCH_BROKER_CPUS:-1}
CLIENT_CPUS=${BENCH_CLIENT_CPUS:-0}
# Fallback rates when Kafka's (b) is not run (BENCH_BROKERS=weir) or failed.
FALLBACK_A_RATE=50000
FALLBACK_C_RATE=800
COST_WINDOW=20 # s: `weir cost --window` during weir-s3's (a)

KAFKA=$ROOT/tools/kafka/kafka.sh
WEIR=$ROOT/target/release/weir
SERVE_BIN=${BENCH_SERVE_BIN:-$WEIR}
KAFKA_PORT=19192
KAFKA_CONTROLLER_PORT=19193
WEIR_PORT=19292
WEIR_ADMIN_PORT=19293
S3_PORT=19294
S3_BUCKET=weir-bench
S3_PREFIX=weir
S3_ACCESS_KEY=weir-bench
S3_SECRET_KEY=weir-bench-secret
S3_MARK=.weir-bench-s3 # in the s3s-fs root: the bench made it and may empty it
if [[ -n ${S3S_FS:-} ]]; then
  S3FS=$S3S_FS
elif [[ -x $HOME/.cargo/bin/s3s-fs ]]; then
  S3FS=$HOME/.cargo/bin/s3s-fs
else
  S3FS=s3s-fs
fi
if [[ -n ${BENCH_S3_DIR:-} ]]; then
  S3_DIR=$BENCH_S3_DIR
elif [[ -d /dev/shm ]] && (($(df -B1G --output=avail /dev/shm 2>/dev/null | tail -1 || echo 0) >= 16)); then
  S3_DIR=/dev/shm/weir-bench-s3
else
  S3_DIR=$WORK/s3
fi

STAMP=$(date +%Y-%m-%d-%H%M)
RESULTS=${BENCH_RESULTS:-$ROOT/bench/results}
OUT=$RESULTS/$STAMP
mkdir -p "$OUT" "$WORK"

log() { echo "bench: $*" >&2; }
# (p) writes about 10 GiB of objects and a 2 GiB WAL per broker (Weir keeps its objects: no
# retention in the bench); with less room the disk fills and the uploads fail, which makes the
# WAL fill and the run measure that instead (seen here with 12 GiB free).
free_gib=$(df -B1G --output=avail "$WORK" 2>/dev/null | tail -1 | tr -d ' ' || echo 0)
if ((free_gib < 24)); then
  log "warning: $free_gib GiB free under $WORK: (p) and (d) need about 24 GiB; the figures of a run that fills the disk are not the broker's"
fi
# With BENCH_PIN=1 a broker gets cores of its own (its threads and children inherit the
# affinity), so that Kafka and Weir run on equal hardware and the load generator on its own.
# Prefixes, not functions: taskset execs, so `$!` stays the process's own pid.
ON_BROKER_CPUS=()
ON_CLIENT_CPUS=()
if [[ $PIN == 1 ]]; then
  command -v taskset >/dev/null || { log "error: BENCH_PIN=1 needs taskset (util-linux)"; exit 1; }
  ON_BROKER_CPUS=(taskset -c "$BROKER_CPUS")
  ON_CLIENT_CPUS=(taskset -c "$CLIENT_CPUS")
fi
die() { log "error: $*"; exit 1; }

# ---------------------------------------------------------------- brokers

WEIR_PID=
WEIR_LOG=
S3_PID=
COST_PID=
KAFKA_UP=
stop_s3() {
  [[ -n $S3_PID ]] || return 0
  kill -TERM "$S3_PID" 2>/dev/null || true
  wait "$S3_PID" 2>/dev/null || true
  S3_PID=
}
# Empties the s3s-fs root (refusing a non-empty directory the bench did not make) and creates
# the bucket, a directory under it.
fresh_s3_dir() {
  if [[ -d $S3_DIR && ! -e $S3_DIR/$S3_MARK ]] && [[ -n $(ls -A "$S3_DIR") ]]; then
    die "BENCH_S3_DIR $S3_DIR is not empty and was not made by the bench; not emptying it"
  fi
  rm -rf "$S3_DIR"
  mkdir -p "$S3_DIR/$S3_BUCKET"
  touch "$S3_DIR/$S3_MARK"
}
remove_s3_dir() {
  [[ -e $S3_DIR/$S3_MARK ]] && rm -rf "$S3_DIR"
  return 0
}
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
cleanup() {
  [[ -z $COST_PID ]] || kill "$COST_PID" 2>/dev/null || true
  stop_proc_sampler
  stop_weir
  stop_s3
  stop_kafka
  # s3s-fs's root may be in /dev/shm, that is in memory.
  [[ ${BENCH_KEEP_DATA:-0} == 1 ]] || remove_s3_dir
}
trap cleanup EXIT
trap 'exit 130' INT TERM

s3_listens() { (exec 3<>"/dev/tcp/127.0.0.1/$S3_PORT") 2>/dev/null; }
start_s3() { # s3s-fs on an empty root, with the bucket
  fresh_s3_dir
  if s3_listens; then die "port $S3_PORT is in use (another s3s-fs?)"; fi
  "${ON_CLIENT_CPUS[@]}" "$S3FS" --host 127.0.0.1 --port "$S3_PORT" --access-key "$S3_ACCESS_KEY" \
    --secret-key "$S3_SECRET_KEY" "$S3_DIR" >"$WORK/s3s-fs.log" 2>&1 &
  S3_PID=$!
  local ok=
  for _ in $(seq 1 100); do
    if s3_listens; then ok=1; break; fi
    kill -0 "$S3_PID" 2>/dev/null || break
    sleep 0.2
  done
  [[ -n $ok ]] || { tail -n 30 "$WORK/s3s-fs.log" >&2; die "s3s-fs did not start"; }
}

BOOTSTRAP=
start_broker() { # broker; sets BOOTSTRAP (not in a subshell: it records pids)
  local broker=$1
  case $broker in
    kafka)
      rm -rf "$WORK/kafka"
      "${ON_BROKER_CPUS[@]}" "$KAFKA" start --data-dir "$WORK/kafka" --port $KAFKA_PORT \
        --controller-port $KAFKA_CONTROLLER_PORT >/dev/null
      KAFKA_UP=1
      BOOTSTRAP=127.0.0.1:$KAFKA_PORT
      ;;
    weir | weir-s3)
      rm -rf "${WORK:?}/$broker"
      mkdir -p "$WORK/$broker"
      WEIR_LOG=$WORK/$broker.log
      local store=() envs=()
      if [[ $broker == weir-s3 ]]; then
        start_s3
        store=(--object-store-url "s3://$S3_BUCKET/$S3_PREFIX")
        # What the S3 client (object_store's AmazonS3Builder::from_env) reads.
        envs=(-u AWS_SESSION_TOKEN -u AWS_ENDPOINT_URL_S3 -u AWS_PROFILE
          AWS_ENDPOINT_URL="http://127.0.0.1:$S3_PORT" AWS_ALLOW_HTTP=true
          AWS_ACCESS_KEY_ID="$S3_ACCESS_KEY" AWS_SECRET_ACCESS_KEY="$S3_SECRET_KEY"
          AWS_REGION=us-east-1 AWS_VIRTUAL_HOSTED_STYLE_REQUEST=false)
      fi
      envs+=(WEIR_SCHEMA_REGISTRY_LISTEN=127.0.0.1:0)
      "${ON_BROKER_CPUS[@]}" env "${envs[@]}" "$SERVE_BIN" serve --data-dir "$WORK/$broker" --listen "127.0.0.1:$WEIR_PORT" \
        --admin-listen "127.0.0.1:$WEIR_ADMIN_PORT" "${store[@]}" >"$WEIR_LOG" 2>&1 &
      WEIR_PID=$!
      local ok=
      for _ in $(seq 1 120); do
        if curl -fs -o /dev/null "http://127.0.0.1:$WEIR_ADMIN_PORT/readyz"; then ok=1; break; fi
        kill -0 "$WEIR_PID" 2>/dev/null || break
        sleep 0.5
      done
      [[ -n $ok ]] || { tail -n 30 "$WEIR_LOG" >&2; die "$broker did not become ready"; }
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
    weir | weir-s3)
      # Counters since the broker started (warm-up, backlog and measured period), before the
      # shutdown's last upload.
      if curl -fs "http://127.0.0.1:$WEIR_ADMIN_PORT/metrics" >"$WORK/$1-$2.metrics"; then
        cp "$WORK/$1-$2.metrics" "$OUT/$1-$2.metrics"
      fi
      stop_weir
      cp "$WEIR_LOG" "$WORK/$1-$2.broker.log" 2>/dev/null || true
      if [[ $1 == weir-s3 ]]; then
        stop_s3
        cp "$WORK/s3s-fs.log" "$WORK/$1-$2.s3s-fs.log" 2>/dev/null || true
        [[ ${BENCH_KEEP_DATA:-0} == 1 ]] || remove_s3_dir
      fi
      ;;
  esac
  [[ ${BENCH_KEEP_DATA:-0} == 1 ]] || rm -rf "${WORK:?}/$1"
}

# ---------------------------------------------------------------- workloads

json_field() { # file python-expression-on-d
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1" 2>/dev/null
}

secs() { # a duration as weir perf takes it (500ms, 10s, 2m, 1h) -> whole seconds
  python3 -c "
import re, sys
m = re.fullmatch(r'([0-9.]+)(ms|s|m|h)?', sys.argv[1].strip())
if not m:
    sys.exit('bad duration: ' + sys.argv[1])
print(int(float(m.group(1)) * {'ms': 0.001, 's': 1, None: 1, 'm': 60, 'h': 3600}[m.group(2)]))
" "$1"
}

A_RATE=${BENCH_A_RATE:-}
C_RATE=${BENCH_C_RATE:-}

workload_args() { # workload -> perf flags
  local common=(--partitions "$PARTITIONS" --producers 1 --groups 1 --consumers 1
    --producer-config acks=all --producer-config linger.ms=1 --quiet --delete-topics)
  case $1 in
    a) echo "${common[@]} --record-size 1024 --rate ${A_RATE:-$FALLBACK_A_RATE} --warmup $WARMUP --duration $DURATION" ;;
    b) echo "${common[@]} --record-size 1024 --rate 0 --warmup $WARMUP --duration $DURATION" ;;
    # The broker's maximum durable produce rate: no consumer in the load generator, whose
    # reading would otherwise take client CPU from the producer.
    p) echo "--partitions $PARTITIONS --producers 1 --groups 0 --producer-config acks=all" \
      "--producer-config linger.ms=1 --quiet --delete-topics --record-size 1024 --rate 0" \
      "--warmup $WARMUP --duration $DURATION" ;;
    c) echo "${common[@]} --record-size 65536 --rate ${C_RATE:-$FALLBACK_C_RATE} --warmup $WARMUP --duration $DURATION" ;;
    d) echo "${common[@]} --record-size 1024 --throughput-mib $D_MIB --warmup $WARMUP --backlog $BACKLOG --duration $D_DURATION" ;;
  esac
}

# The broker's process, for its CPU time and resident memory.
broker_pid() { # broker
  case $1 in
    kafka) cat "$WORK/kafka/kafka.pid" 2>/dev/null || true ;;
    *) echo "$WEIR_PID" ;;
  esac
}
PROC_PID=
# Samples the broker's CPU ticks (user + system) and resident memory every second into FILE:
# "seconds-since-start ticks rss-KiB"; the first line is taken before the load starts (idle).
start_proc_sampler() { # pid file
  local pid=$1 file=$2
  [[ -n $pid && -d /proc/$pid ]] || return 0
  (
    t0=$(date +%s.%N)
    while [[ -d /proc/$pid ]]; do
      ticks=$(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null) || break
      rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status" 2>/dev/null) || break
      echo "$(python3 -c "import time; print(round(time.time() - $t0, 2))") $ticks $rss"
      sleep 1
    done
  ) >"$file" 2>/dev/null &
  PROC_PID=$!
}
stop_proc_sampler() {
  [[ -n $PROC_PID ]] || return 0
  kill "$PROC_PID" 2>/dev/null || true
  wait "$PROC_PID" 2>/dev/null || true
  PROC_PID=
}

run_workload() { # broker workload
  local broker=$1 w=$2 args json=$OUT/$1-$2.json
  args=$(workload_args "$w")
  start_broker "$broker"
  # Idle for a few seconds after start-up, then sampled through the workload.
  sleep 3
  start_proc_sampler "$(broker_pid "$broker")" "$OUT/$broker-$w.proc"
  local chart=()
  [[ $CHARTS == 1 ]] && chart=(--chart "$OUT/$broker-$w.svg")
  log "$broker ($w): weir perf --bootstrap-servers $BOOTSTRAP $args"
  local t0=$SECONDS rc=0
  if [[ $broker == weir-s3 && $w == a ]]; then
    # The bill of the measured period: two scrapes of /metrics, the first 1 s after the
    # warm-up, COST_WINDOW apart (less if the measured period is shorter).
    local warm dur win
    warm=$(secs "$WARMUP")
    dur=$(secs "$DURATION")
    win=$((dur - 2 < COST_WINDOW ? dur - 2 : COST_WINDOW))
    ((win >= 1)) || win=1
    local cost=(cost --metrics-url "http://127.0.0.1:$WEIR_ADMIN_PORT/metrics" --window "${win}s")
    (
      echo "\$ weir ${cost[*]}   # from $((warm + 1)) s after weir perf started"
      sleep $((warm + 1))
      "$WEIR" "${cost[@]}"
    ) >"$OUT/$broker-$w.cost.txt" 2>&1 &
    COST_PID=$!
    log "$broker ($w): weir cost over $win s of the measured period, in the background"
  fi
  # shellcheck disable=SC2086
  "${ON_CLIENT_CPUS[@]}" "$WEIR" perf --bootstrap-servers "$BOOTSTRAP" $args --output "$json" "${chart[@]}" \
    2>&1 | tee "$WORK/$broker-$w.log" || rc=$?
  stop_proc_sampler
  if [[ -n $COST_PID ]]; then
    wait "$COST_PID" || log "$broker ($w): weir cost failed: $(tail -n 1 "$OUT/$broker-$w.cost.txt")"
    COST_PID=
  fi
  if [[ $broker == weir* ]] && ! kill -0 "$WEIR_PID" 2>/dev/null; then
    log "$broker is not running any more after ($w); end of its log:"
    tail -n 30 "$WEIR_LOG" >&2
    rc=1
  fi
  if [[ $broker == weir-s3 ]] && ! kill -0 "$S3_PID" 2>/dev/null; then
    log "s3s-fs is not running any more after ($w); end of its log:"
    tail -n 30 "$WORK/s3s-fs.log" >&2
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
CPU_BEFORE=$(head -1 /proc/stat)
if [[ ${BENCH_NO_BUILD:-0} != 1 ]]; then
  log "building weir (release)"
  (cd "$ROOT" && cargo build --release -p weir)
fi
[[ -x $WEIR ]] || die "$WEIR not found"
[[ $BROKERS == *kafka* ]] && "$KAFKA" install
if [[ " $BROKERS " == *" weir-s3 "* ]]; then
  command -v "$S3FS" >/dev/null ||
    die "s3s-fs not found ($S3FS); install it: cargo install s3s-fs@0.14.1 --features binary --locked"
  log "weir-s3: s3s-fs root $S3_DIR"
fi
: >"$OUT/commands.txt"

# AutoMQ's comparison workload (their FSx article): 1 GiB/s in and out, 3 days retention.
if ! "$WEIR" cost --write-mib-s 1024 --read-mib-s 1024 --retention-days 3 >"$OUT/cost-automq.txt" 2>&1; then
  log "weir cost (AutoMQ's workload) failed: $(tail -n 1 "$OUT/cost-automq.txt")"
fi

for broker in $BROKERS; do
  for w in $WORKLOADS; do
    if [[ $broker == weir-s3 && " $S3_WORKLOADS " != *" $w "* ]]; then continue; fi
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
# Steal: time the hypervisor gave this VM's cores to others (8th field of the cpu line).
STEAL=$(printf '%s\n%s\n' "$CPU_BEFORE" "$(head -1 /proc/stat)" | awk '
  { t = 0; for (i = 2; i <= NF; i++) t += $i; tot[NR] = t; st[NR] = $9 }
  END { d = tot[2] - tot[1]; if (d > 0) printf "%.1f%%", 100 * (st[2] - st[1]) / d; else print "?" }')
ELAPSED=$((SECONDS - T_START))

# Machine description for the report.
disk_dev=$(df --output=source "$WORK" | tail -1)
disk_fs=$(df --output=fstype "$WORK" | tail -1)
disk_base=$(basename "$disk_dev")
rot=$(cat "/sys/block/$disk_base/queue/rotational" 2>/dev/null || echo "?")
weir_desc=$(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null)$(cd "$ROOT" && git diff --quiet HEAD 2>/dev/null || echo "+local changes")
if [[ $SERVE_BIN != "$WEIR" ]]; then
  # Another build's broker: where it came from, if it sits in a git checkout.
  serve_dir=$(dirname "$SERVE_BIN")
  serve_rev=$(cd "$serve_dir" 2>/dev/null && git rev-parse --short HEAD 2>/dev/null || true)
  weir_desc="broker $SERVE_BIN${serve_rev:+ (checkout at $serve_rev)}; load generator $weir_desc"
fi
cat >"$OUT/machine.txt" <<EOF
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
cores=$(nproc)
memory=$(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)
disk=$disk_dev ($disk_fs, $( [[ $rot == 0 ]] && echo SSD/virtual || { [[ $rot == 1 ]] && echo "rotational (as reported; virtual disk)" || echo "type unknown"; } ), $(lsblk -dno SIZE "$disk_dev" 2>/dev/null | head -1 | tr -d ' ')); data dirs under $WORK
kernel=$(uname -sr)
os=$(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")
weir=$weir_desc
kafka=$(bash "$ROOT/tools/kafka/kafka.sh" classpath | tr ':' '\n' | sed -n 's|.*/kafka_2.13-\(.*\)\.jar|\1|p' | head -1) ($(java -version 2>&1 | head -1), heap 1 GiB, G1)
rustc=$(rustc --version)
librdkafka=$(json_field "$(ls "$OUT"/*.json | head -1)" "d['librdkafka']" || echo "?")
$(if [[ " $BROKERS " == *" weir-s3 "* ]]; then
  echo "s3=$("$S3FS" --version 2>/dev/null | head -1) on 127.0.0.1:$S3_PORT, root $S3_DIR ($(df --output=fstype "$(dirname "$S3_DIR")" | tail -1)); weir-s3's WAL and metadata under $WORK"
fi)
cpus=$(if [[ $PIN == 1 ]]; then echo "pinned: each broker on core(s) $BROKER_CPUS, the load generator and s3s-fs on $CLIENT_CPUS (BENCH_PIN=1)"; else echo "shared: brokers, load generator and s3s-fs on all cores"; fi)
steal=$STEAL of the cores' time over the run (taken by the hypervisor)
load=$LOAD_BEFORE before, $LOAD_AFTER after (1/5/15 min load averages)
elapsed=$ELAPSED s
EOF

python3 "$ROOT/bench/report.py" "$OUT" "$RESULTS/$STAMP.md"
# The object WAL's section (bench/object_wal.py): its own brokers, appended to the report.
if [[ ${BENCH_OBJECT_WAL:-1} == 1 ]]; then
  if ! WEIR_BIN=$WEIR WEIR_SERVE_BIN=$SERVE_BIN BENCH_OW_RESULTS=$OUT BENCH_OW_APPEND_TO=$RESULTS/$STAMP.md \
    python3 "$ROOT/bench/object_wal.py"; then
    log "the object WAL section failed"
    echo "object-wal failed" >>"$OUT/failures.txt"
  fi
fi
# OpenMessaging Benchmark workloads (bench/omb.py): the workload files in bench/workloads/ on both.
if [[ ${BENCH_OMB:-1} == 1 ]]; then
  if ! WEIR_BIN=$WEIR WEIR_SERVE_BIN=$SERVE_BIN BENCH_OMB_OUT=$OUT/omb.md BENCH_OMB_APPEND_TO=$RESULTS/$STAMP.md \
    python3 "$ROOT/bench/omb.py"; then
    log "the OpenMessaging Benchmark section failed"
    echo "omb failed" >>"$OUT/failures.txt"
  fi
fi
# Kafka's ProducerPerformance (bench/producer_perf.py): maximum and 30,000 records/s, one partition.
if [[ ${BENCH_PRODUCER_PERF:-1} == 1 ]]; then
  if ! WEIR_BIN=$WEIR WEIR_SERVE_BIN=$SERVE_BIN BENCH_PP_RESULTS=$OUT BENCH_PP_APPEND_TO=$RESULTS/$STAMP.md \
    python3 "$ROOT/bench/producer_perf.py"; then
    log "the ProducerPerformance section failed"
    echo "producer-perf failed" >>"$OUT/failures.txt"
  fi
fi
# TLS (bench/tls.py): ProducerPerformance over SASL_SSL beside PLAINTEXT, on both brokers.
if [[ ${BENCH_TLS:-1} == 1 ]]; then
  if ! WEIR_BIN=$WEIR WEIR_SERVE_BIN=$SERVE_BIN BENCH_TLS_RESULTS=$OUT BENCH_TLS_APPEND_TO=$RESULTS/$STAMP.md \
    python3 "$ROOT/bench/tls.py"; then
    log "the TLS section failed"
    echo "tls failed" >>"$OUT/failures.txt"
  fi
fi
# Schema validation (bench/schema_validation.py): produce to a topic without it, with the id
# checked, and with payloads decoded (Weir only: Kafka has no registry).
if [[ ${BENCH_SCHEMA_VALIDATION:-1} == 1 ]]; then
  if ! WEIR_BIN=$WEIR WEIR_SERVE_BIN=$SERVE_BIN BENCH_SV_RESULTS=$OUT BENCH_SV_APPEND_TO=$RESULTS/$STAMP.md \
    python3 "$ROOT/bench/schema_validation.py"; then
    log "the schema validation section failed"
    echo "schema-validation failed" >>"$OUT/failures.txt"
  fi
fi
# Many partitions (bench/partitions.py): 16, 1,000 and 10,000 partitions beside Kafka.
if [[ ${BENCH_MANY_PARTITIONS:-1} == 1 ]]; then
  if ! WEIR_BIN=$WEIR WEIR_SERVE_BIN=$SERVE_BIN BENCH_P_RESULTS=$OUT BENCH_P_APPEND_TO=$RESULTS/$STAMP.md \
    python3 "$ROOT/bench/partitions.py"; then
    log "the many-partitions section failed"
    echo "partitions failed" >>"$OUT/failures.txt"
  fi
fi
# Zones (bench/zones.py): a zoned cluster and a three-broker Kafka of its own, appended too.
if [[ ${BENCH_ZONES:-1} == 1 ]]; then
  if ! WEIR_BIN=$WEIR WEIR_SERVE_BIN=$SERVE_BIN BENCH_Z_RESULTS=$OUT BENCH_Z_APPEND_TO=$RESULTS/$STAMP.md \
    python3 "$ROOT/bench/zones.py"; then
    log "the zones section failed"
    echo "zones failed" >>"$OUT/failures.txt"
  fi
fi
log "written: $RESULTS/$STAMP.md and $RESULTS/$STAMP/ ($ELAPSED s)"

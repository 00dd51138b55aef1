#!/usr/bin/env bash
# Launcher for Apache Kafka 4.4 as a single KRaft node (broker+controller), built
# only from Maven Central jars. Baseline for Weir benchmarks; see README.md.
#
#   kafka.sh install
#   kafka.sh start --data-dir DIR --port PORT [--controller-port CPORT]
#                  [--prop key=value]... [--timeout SECS]
#   kafka.sh start --data-dir DIR --port PORT --node-id N --join CPORT --cluster-id ID
#                  [--prop key=value]...
#       a broker-only node joining the quorum of the node whose controller port is CPORT
#       (its cluster id is in that node's DIR/logs/meta.properties): a cluster on one machine
#   kafka.sh stop --data-dir DIR [--timeout SECS]
#   kafka.sh status --data-dir DIR
#   kafka.sh classpath
#   kafka.sh tool CLASS|ALIAS [ARGS...]
#   kafka.sh mirror-maker PROPERTIES [ARGS...]
#       MirrorMaker 2 in dedicated mode (its jars fetched on first use)
#
# Environment:
#   WEIR_KAFKA_VERSION    another Kafka release than the pom's 4.4.0 (e.g. 4.1.2, the
#                         baseline of the benchmarks before 2026-12)
#   WEIR_KAFKA_HOME       cache dir for the jars (default ~/.cache/weir/kafka-4.4, or
#                         ~/.cache/weir/kafka-$WEIR_KAFKA_VERSION)
#   JAVA                  java binary (default: java on PATH)
#   KAFKA_HEAP_OPTS       broker heap (default -Xms1g -Xmx1g, as kafka-server-start.sh)
#   KAFKA_TOOL_HEAP_OPTS  tool heap (default -Xmx512m, as kafka-*-perf-test.sh)
#   KAFKA_JVM_OPTS        extra JVM options for broker and tools
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
POM="$SCRIPT_DIR/pom.xml"
CONF_DIR="$SCRIPT_DIR/conf"
# Another Kafka release than the pom's (4.4.x), e.g. WEIR_KAFKA_VERSION=4.1.2: its jars in a
# cache of their own (an older baseline for figures over time, or a link source of another version).
KAFKA_VERSION="${WEIR_KAFKA_VERSION:-}"
KAFKA_HOME="${WEIR_KAFKA_HOME:-$HOME/.cache/weir/kafka-${KAFKA_VERSION:-4.4}}"
LIBS="$KAFKA_HOME/libs"
JAVA="${JAVA:-java}"

# JVM flags kafka-run-class.sh uses for every Kafka JVM (KAFKA_JVM_PERFORMANCE_OPTS).
# G1 is set explicitly: on a 2-core box the JVM would otherwise pick SerialGC.
JVM_PERF_OPTS=(-server -XX:+UseG1GC -XX:MaxGCPauseMillis=20
  -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent
  -Djava.awt.headless=true)

die() { echo "kafka.sh: error: $*" >&2; exit 1; }
log() { echo "kafka.sh: $*" >&2; }

usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit "${1:-2}"
}

# ---------------------------------------------------------------- install

pom_stamp() { { cat "$POM"; echo "$KAFKA_VERSION"; } | sha256sum | cut -c1-16; }

installed() { [[ -f "$1/.installed" && "$(cat "$1/.installed")" == "$(pom_stamp)" ]]; }

cmd_install() { install_into "$LIBS"; }

# The jars of the pom, with the Maven profiles given (e.g. -Pmirror-maker), into $1.
install_into() {
  local libs=$1; shift
  installed "$libs" && return 0
  command -v mvn >/dev/null || die "mvn not found on PATH"
  mkdir -p "$KAFKA_HOME"
  # Serialize concurrent installs; re-check once we hold the lock.
  exec 9>"$KAFKA_HOME/.install.lock"
  flock 9
  if installed "$libs"; then exec 9>&-; return 0; fi
  local tmp="$libs.tmp.$$" mvnlog="$KAFKA_HOME/install.log"
  rm -rf "$tmp"
  log "fetching Kafka jars from Maven Central into $libs ..."
  local version=()
  [[ -n $KAFKA_VERSION ]] && version=(-Dkafka.version="$KAFKA_VERSION")
  if ! mvn -q -B -f "$POM" dependency:copy-dependencies "${version[@]}" "$@" \
      -DincludeScope=runtime -DoutputDirectory="$tmp" >"$mvnlog" 2>&1; then
    rm -rf "$tmp"
    tail -n 40 "$mvnlog" >&2
    die "mvn dependency:copy-dependencies failed (full log: $mvnlog)"
  fi
  compgen -G "$tmp/kafka_2.13-*.jar" >/dev/null || { rm -rf "$tmp"; die "no kafka_2.13 jar fetched"; }
  pom_stamp >"$tmp/.installed"
  rm -rf "$libs"
  mv "$tmp" "$libs"
  exec 9>&-
}

# conf/ first: it holds the tools' log4j2.properties, found as a classpath resource.
classpath() {
  local cp="$CONF_DIR" j
  for j in "${1:-$LIBS}"/*.jar; do cp+=":$j"; done
  printf '%s\n' "$cp"
}

cmd_classpath() { cmd_install; classpath; }

# ---------------------------------------------------------------- tools

resolve_tool() {
  case "$1" in
    topics)           echo org.apache.kafka.tools.TopicCommand ;;
    producer-perf)    echo org.apache.kafka.tools.ProducerPerformance ;;
    consumer-perf)    echo org.apache.kafka.tools.ConsumerPerformance ;;
    console-producer) echo org.apache.kafka.tools.ConsoleProducer ;;
    console-consumer) echo org.apache.kafka.tools.consumer.ConsoleConsumer ;;
    consumer-groups)  echo org.apache.kafka.tools.consumer.group.ConsumerGroupCommand ;;
    share-groups)     echo org.apache.kafka.tools.consumer.group.ShareGroupCommand ;;
    streams-groups)   echo org.apache.kafka.tools.streams.StreamsGroupCommand ;;
    configs)          echo org.apache.kafka.tools.ConfigCommand ;;
    acls)             echo org.apache.kafka.tools.AclCommand ;;
    features)         echo org.apache.kafka.tools.FeatureCommand ;;
    storage)          echo kafka.tools.StorageTool ;;
    *)                echo "$1" ;;
  esac
}

cmd_tool() {
  [[ $# -ge 1 ]] || die "usage: kafka.sh tool CLASS|ALIAS [ARGS...]"
  cmd_install
  local cls; cls=$(resolve_tool "$1"); shift
  # shellcheck disable=SC2086
  exec "$JAVA" ${KAFKA_TOOL_HEAP_OPTS:--Xmx512m} "${JVM_PERF_OPTS[@]}" ${KAFKA_JVM_OPTS:-} \
    -cp "$(classpath)" "$cls" "$@"
}

# MirrorMaker 2 in dedicated mode (org.apache.kafka.connect.mirror.MirrorMaker) on its
# properties file: the pom's mirror-maker profile (Kafka Connect's runtime, Jetty and Jersey
# among it) in a libs directory of its own, so that the broker and the tools stay lean.
cmd_mirror_maker() {
  [[ $# -ge 1 ]] || die "usage: kafka.sh mirror-maker PROPERTIES [ARGS...]"
  local libs="$KAFKA_HOME/mirror-libs"
  install_into "$libs" -Pmirror-maker
  # shellcheck disable=SC2086
  exec "$JAVA" ${KAFKA_HEAP_OPTS:--Xms256m -Xmx1g} "${JVM_PERF_OPTS[@]}" ${KAFKA_JVM_OPTS:-} \
    -cp "$(classpath "$libs")" org.apache.kafka.connect.mirror.MirrorMaker "$@"
}

# ---------------------------------------------------------------- helpers

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# True while any thread of the process is still around. A zombie thread-group
# leader whose other threads are still exiting counts as running (the JVM looks
# like that while it tears down, with sockets still open); a fully exited but
# unreaped zombie does not.
pid_alive() {
  local pid=$1 state tasks
  [[ $pid =~ ^[0-9]+$ && -d /proc/$pid ]] || return 1
  state=$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1) || return 1
  [[ -n $state ]] || return 1
  if [[ $state == Z ]]; then
    tasks=$(find "/proc/$pid/task" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
    ((tasks > 1)) || return 1
  fi
  return 0
}

# Alive and really our broker (guards against pid reuse).
is_kafka_pid() {
  pid_alive "$1" || return 1
  tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -q 'kafka\.Kafka '
}

# Kafka-protocol liveness check without a JVM: send ApiVersions v0
# (correlation id 1, client id "weir") and expect correlation id 1, error 0.
# The broker only starts serving requests once it is unfenced and fully started.
api_versions_ok() {
  local out
  out=$(timeout 3 bash -c '
    exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
    printf "\x00\x00\x00\x0e\x00\x12\x00\x00\x00\x00\x00\x01\x00\x04weir" >&3
    head -c 10 <&3 | od -An -tx1 | tr -d " \n"' _ "$1" 2>/dev/null) || return 1
  [[ ${out:8:12} == 000000010000 ]]
}

gen_cluster_id() {  # like org.apache.kafka.common.Uuid.randomUuid().toString()
  local id
  while :; do
    id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')
    [[ $id != -* ]] && { echo "$id"; return; }
  done
}

log_tail() {
  local f=$1
  if [[ -f $f ]]; then
    echo "---- last 40 lines of $f ----" >&2
    tail -n 40 "$f" >&2
    echo "----" >&2
  fi
}

# ---------------------------------------------------------------- start

cmd_start() {
  local dir="" port="" cport="" timeout=60 props=() node_id=1 join="" cluster_id=""
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --data-dir)        dir=${2:?}; shift 2 ;;
      --port)            port=${2:?}; shift 2 ;;
      --controller-port) cport=${2:?}; shift 2 ;;
      --node-id)         node_id=${2:?}; shift 2 ;;
      --join)            join=${2:?}; shift 2 ;;
      --cluster-id)      cluster_id=${2:?}; shift 2 ;;
      --prop)            props+=("${2:?}"); shift 2 ;;
      --timeout)         timeout=${2:?}; shift 2 ;;
      -h|--help)         usage 0 ;;
      *) die "start: unknown argument '$1'" ;;
    esac
  done
  [[ -n $dir && -n $port ]] || die "usage: kafka.sh start --data-dir DIR --port PORT [--controller-port CPORT]"
  [[ $port =~ ^[0-9]+$ ]] || die "bad --port '$port'"
  cport=${cport:-$((port + 1))}
  [[ $cport =~ ^[0-9]+$ && $cport != "$port" ]] || die "bad --controller-port '$cport'"

  cmd_install
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  local pidfile="$dir/kafka.pid" logfile="$dir/kafka.log" props_file="$dir/server.properties"

  if [[ -f $pidfile ]]; then
    local old; old=$(cat "$pidfile")
    is_kafka_pid "$old" && die "Kafka already running in $dir (pid $old)"
    rm -f "$pidfile"
  fi
  port_in_use "$port" && die "port $port on 127.0.0.1 is already in use"
  [[ -n $join ]] || ! port_in_use "$cport" || die "controller port $cport on 127.0.0.1 is already in use"
  [[ -z $join || -n $cluster_id ]] || die "--join needs --cluster-id"

  local listeners="PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport"
  local roles="broker,controller" quorum="127.0.0.1:$cport"
  if [[ -n $join ]]; then
    listeners="PLAINTEXT://127.0.0.1:$port"
    roles="broker"
    quorum="127.0.0.1:$join"
  fi
  local formatted=0
  [[ -f $dir/logs/meta.properties ]] && formatted=1
  if ((formatted)) && [[ -f $props_file ]] && ! grep -qxF "listeners=$listeners" "$props_file"; then
    # The standalone (dynamic) quorum records the controller endpoint at format time.
    die "$dir was formatted with different ports ($(grep '^listeners=' "$props_file")); use the same ports or a fresh --data-dir"
  fi

  {
    echo "# Written by tools/kafka/kafka.sh start; rewritten on every start."
    echo "process.roles=$roles"
    echo "node.id=$node_id"
    echo "controller.quorum.bootstrap.servers=$quorum"
    echo "listeners=$listeners"
    echo "advertised.listeners=$listeners"
    echo "inter.broker.listener.name=PLAINTEXT"
    echo "controller.listener.names=CONTROLLER"
    echo "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"
    echo "log.dirs=$dir/logs"
    echo "num.partitions=1"
    echo "auto.create.topics.enable=true"
    echo "offsets.topic.replication.factor=1"
    echo "transaction.state.log.replication.factor=1"
    echo "transaction.state.log.min.isr=1"
    echo "share.coordinator.state.topic.replication.factor=1"
    echo "share.coordinator.state.topic.min.isr=1"
    echo "group.initial.rebalance.delay.ms=0"
    # Compaction tests (tests/compat) want the cleaner within seconds, not 15 s.
    echo "log.cleaner.backoff.ms=1000"
    # Consumer groups (KIP-848) in tests: heartbeats every second, as the Weir harnesses set.
    echo "group.consumer.min.heartbeat.interval.ms=1000"
    echo "group.consumer.heartbeat.interval.ms=1000"
    if ((${#props[@]})); then
      echo "# --prop overrides"
      printf '%s\n' "${props[@]}"
    fi
  } >"$props_file"

  local cp; cp=$(classpath)
  if ((!formatted)); then
    local cid=$cluster_id mode=(--standalone)
    [[ -n $cid ]] || cid=$(gen_cluster_id)
    [[ -z $join ]] || mode=()
    # shellcheck disable=SC2086
    if ! "$JAVA" -Xmx256m ${KAFKA_JVM_OPTS:-} -cp "$cp" kafka.tools.StorageTool \
        format "${mode[@]}" -t "$cid" -c "$props_file" >"$dir/format.log" 2>&1; then
      cat "$dir/format.log" >&2
      die "kafka-storage format failed (log: $dir/format.log)"
    fi
  fi

  # shellcheck disable=SC2086
  setsid "$JAVA" ${KAFKA_HEAP_OPTS:--Xms1g -Xmx1g} "${JVM_PERF_OPTS[@]}" ${KAFKA_JVM_OPTS:-} \
    -Dlog4j2.configurationFile="$CONF_DIR/log4j2-broker.properties" \
    -cp "$cp" kafka.Kafka "$props_file" </dev/null >"$logfile" 2>&1 &
  local pid=$!
  echo "$pid" >"$pidfile"

  local deadline=$((SECONDS + timeout))
  while :; do
    if ! pid_alive "$pid"; then
      rm -f "$pidfile"
      log_tail "$logfile"
      die "Kafka exited during startup (log: $logfile)"
    fi
    if api_versions_ok "$port"; then
      is_kafka_pid "$pid" || die "pid $pid answering on $port is not kafka.Kafka?"
      break
    fi
    if ((SECONDS >= deadline)); then
      log_tail "$logfile"
      log "Kafka did not become ready within ${timeout}s; stopping it"
      stop_pid "$pid" 10 || true
      rm -f "$pidfile"
      die "startup timed out (log: $logfile)"
    fi
    sleep 0.5
  done
  log "Kafka $(kafka_version) ready on 127.0.0.1:$port (controller $cport, pid $pid, dir $dir)"
}

kafka_version() {
  local j
  j=$(compgen -G "$LIBS/kafka_2.13-*.jar" | head -n1)
  j=${j##*/kafka_2.13-}
  echo "${j%.jar}"
}

# ---------------------------------------------------------------- stop / status

# SIGTERM (controlled shutdown), then SIGKILL after $2 seconds.
stop_pid() {
  local pid=$1 grace=$2 i
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < grace * 5; i++)); do
    pid_alive "$pid" || return 0
    sleep 0.2
  done
  log "pid $pid still alive after ${grace}s; sending SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do
    pid_alive "$pid" || return 0
    sleep 0.2
  done
  return 1
}

cmd_stop() {
  local dir="" timeout=30
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --data-dir) dir=${2:?}; shift 2 ;;
      --timeout)  timeout=${2:?}; shift 2 ;;
      -h|--help)  usage 0 ;;
      *) die "stop: unknown argument '$1'" ;;
    esac
  done
  [[ -n $dir ]] || die "usage: kafka.sh stop --data-dir DIR [--timeout SECS]"
  local pidfile="$dir/kafka.pid"
  if [[ ! -f $pidfile ]]; then
    log "not running (no $pidfile)"
    return 0
  fi
  local pid; pid=$(cat "$pidfile")
  if ! is_kafka_pid "$pid"; then
    log "not running (stale pid $pid)"
    rm -f "$pidfile"
    return 0
  fi
  stop_pid "$pid" "$timeout" || die "could not stop pid $pid"
  rm -f "$pidfile"
  log "stopped (pid $pid)"
}

cmd_status() {
  local dir=""
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --data-dir) dir=${2:?}; shift 2 ;;
      *) die "status: unknown argument '$1'" ;;
    esac
  done
  [[ -n $dir ]] || die "usage: kafka.sh status --data-dir DIR"
  local pid
  pid=$(cat "$dir/kafka.pid" 2>/dev/null) || { echo "stopped"; return 1; }
  if is_kafka_pid "$pid"; then echo "running (pid $pid)"; else echo "stopped"; return 1; fi
}

# ---------------------------------------------------------------- main

[[ $# -ge 1 ]] || usage
sub=$1; shift
case "$sub" in
  install)   cmd_install "$@" ;;
  start)     cmd_start "$@" ;;
  stop)      cmd_stop "$@" ;;
  status)    cmd_status "$@" ;;
  classpath) cmd_classpath ;;
  tool)      cmd_tool "$@" ;;
  mirror-maker) cmd_mirror_maker "$@" ;;
  -h|--help|help) usage 0 ;;
  *) log "unknown subcommand '$sub'"; usage ;;
esac

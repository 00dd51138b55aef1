#!/usr/bin/env bash
# Allocator settings at weir perf's maximum produce rate (1 KiB records, acks=all, 16 partitions,
# no consumers): the broker pinned to CPU 0, weir perf to CPU 1, the settings alternated, ROUNDS
# rounds. Prints MiB produced in the measured 25 s, the broker's CPU seconds over the whole run
# and MiB per broker CPU second. Usage:
#   bench/alloc-perf.sh WEIR_BIN ROUNDS CONF...   (CONF: _RJEM_MALLOC_CONF; "" = compiled-in)
set -u
BIN=$1; ROUNDS=$2; shift 2
for round in $(seq $ROUNDS); do
  for conf in "$@"; do
    d=$(mktemp -d)
    read -r kp ap < <(python3 "$(dirname "$0")/../tests/harness/weir_harness" ports 2 | tr -d '[],')
    _RJEM_MALLOC_CONF=$conf WEIR_WAL_CAPACITY=1073741824 WEIR_SCHEMA_REGISTRY_LISTEN=127.0.0.1:0 taskset -c 0 $BIN serve --data-dir $d \
      --listen 127.0.0.1:$kp --admin-listen 127.0.0.1:$ap > $d/log 2>&1 &
    pid=$!
    for i in $(seq 50); do curl -sf http://127.0.0.1:$ap/readyz >/dev/null && break; sleep 0.2; done
    t0=$(awk '{print $14+$15}' /proc/$pid/stat)
    taskset -c 1 $BIN perf --bootstrap-servers 127.0.0.1:$kp --partitions 16 --groups 0 --rate 0 \
      --warmup 5s --duration 25s > $d/perf.txt 2>&1
    t1=$(awk '{print $14+$15}' /proc/$pid/stat)
    hwm=$(awk '/VmHWM/{print int($2/1024)}' /proc/$pid/status)
    rss=$(awk '/VmRSS/{print int($2/1024)}' /proc/$pid/status)
    # The results' first "produce" line: records/s, MiB/s, records, errors.
    mib=$(awk '$1 == "produce" {print $3; exit}' $d/perf.txt)
    cpu=$(echo "scale=2; ($t1-$t0)/100" | bc)
    per_cpu=$(echo "scale=0; $mib*25/$cpu" | bc)
    echo "round=$round conf='${conf:-compiled}' MiB/s=$mib broker_cpu_s=$cpu MiB_per_cpu_s=$per_cpu peak_rss_mib=$hwm end_rss_mib=$rss"
    kill $pid; wait $pid 2>/dev/null; rm -rf $d
  done
done

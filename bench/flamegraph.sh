#!/usr/bin/env bash
# A flame graph of a running `weir serve`: samples it with perf for a while, renders an SVG.
#
#   bench/flamegraph.sh OUT.svg [SECONDS] [DELAY] [TITLE]
#
# Waits for a `weir serve` process (the bench's, or any), sleeps DELAY seconds (default 0), then
# records SECONDS (default 20) of it at 199 Hz with DWARF call graphs, and renders OUT.svg with
# inferno (cargo install inferno). Needs `perf` (Debian: linux-perf) and a release build with
# debug info (the workspace's release profile has it). Example, the catch-up of `make bench`'s
# (d) on s3s-fs, recorded from 5 s after the consumer starts:
#
#   BENCH_BROKERS=weir-s3 BENCH_WORKLOADS=d BENCH_S3_WORKLOADS=d BENCH_BACKLOG=40s bench/run.sh &
#   bench/flamegraph.sh docs/flamegraphs/catchup-s3.svg 20 55 "catch-up from s3s-fs"
set -euo pipefail
out=${1:?usage: flamegraph.sh OUT.svg [SECONDS] [DELAY] [TITLE]}
secs=${2:-20}
delay=${3:-0}
title=${4:-weir serve}
command -v perf >/dev/null || { echo "flamegraph.sh: perf not found (Debian: apt-get install linux-perf)" >&2; exit 1; }
command -v inferno-flamegraph >/dev/null || { echo "flamegraph.sh: inferno not found (cargo install inferno)" >&2; exit 1; }
pid=
for _ in $(seq 1 600); do
  pid=$(pgrep -f "^[^ ]*weir serve" | head -1 || true)
  [[ -n $pid ]] && break
  sleep 0.5
done
[[ -n $pid ]] || { echo "flamegraph.sh: no weir serve process" >&2; exit 1; }
sleep "$delay"
data=$(mktemp /tmp/weir-perf.XXXXXX)
trap 'rm -f "$data"' EXIT
perf record -F 199 -g --call-graph dwarf,16384 -p "$pid" -o "$data" -- sleep "$secs" >/dev/null 2>&1
# The folded stacks are kept beside the SVG (OUT.folded), for tools that count them.
perf script -i "$data" 2>/dev/null | inferno-collapse-perf >"${out%.svg}.folded"
inferno-flamegraph --title "$title" --width 1400 --minwidth 0.5 <"${out%.svg}.folded" >"$out"
echo "flamegraph.sh: $out"

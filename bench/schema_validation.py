#!/usr/bin/env python3
"""What schema validation costs on the produce path (`make bench-schema-validation`): Kafka's
ProducerPerformance against a fresh single Weir broker per run, on a topic without validation,
with `confluent.value.schema.validation=true` (the schema id is registered under the subject),
and with `weir.schema.validation=full` as well (every value parsed and checked against its JSON
Schema), the same records in all three.

    WEIR_BIN=target/release/weir bench/schema_validation.py

The records are BENCH_SV_RECORDS_IN_FILE [2000] lines of a payload file: each the schema
registry's wire format (magic byte 0, the 4-byte schema id 1) and a JSON document of about 1 KiB
(ten fields and a padding string) valid under a JSON Schema of those fields with types, bounds
and a pattern, registered as pp-value before the load. ProducerPerformance sends them as it
would any payload file (acks=all, linger.ms=1, one partition). Per mode:

  max     BENCH_SV_MAX_RECORDS [1000000] records as fast as they go: throughput, CPU per GiB
  rate    BENCH_SV_RATE [10000] records/s for BENCH_SV_SECONDS [30] s, after BENCH_SV_WARMUP
          [10] s of the same in the same JVM (tools/kafka/WarmProducerPerformance.java: the
          JIT's first seconds are not the broker's latency): latency percentiles

Writes bench/results/schema-validation-YYYY-MM-DD-HHMM.md (and .json; appends the section to
BENCH_SV_APPEND_TO when set, as `make bench` does).
Environment: WEIR_BIN (required), BENCH_SV_MODES ["off id full"], BENCH_SV_PHASES
["max rate"], BENCH_SV_DIR
[target/bench-schema-validation], BENCH_SV_RESULTS [bench/results].
"""

import datetime
import json
import os
import shutil
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "harness"))
sys.path.insert(0, HERE)

import weir_harness  # noqa: E402
from partitions import write_results  # noqa: E402
from producer_perf import PROPS, fmt, measure  # noqa: E402

MODES = os.environ.get("BENCH_SV_MODES", "off id full").split()
MAX_RECORDS = int(os.environ.get("BENCH_SV_MAX_RECORDS", "1000000"))
PHASES = os.environ.get("BENCH_SV_PHASES", "max rate").split()
RATE = int(os.environ.get("BENCH_SV_RATE", "10000"))
WARMUP = int(os.environ.get("BENCH_SV_WARMUP", "10"))
SECONDS = int(os.environ.get("BENCH_SV_SECONDS", "30"))
IN_FILE = int(os.environ.get("BENCH_SV_RECORDS_IN_FILE", "2000"))
WORK = os.path.abspath(os.environ.get("BENCH_SV_DIR",
                                      os.path.join(REPO, "target", "bench-schema-validation")))
RESULTS = os.path.abspath(os.environ.get("BENCH_SV_RESULTS",
                                         os.path.join(REPO, "bench", "results")))

SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#", "title": "Order", "type": "object",
    "properties": {
        "id": {"type": "string", "pattern": "^o-[0-9]+$"},
        "customer": {"type": "string", "maxLength": 64},
        "qty": {"type": "integer", "minimum": 0, "maximum": 1000000},
        "price": {"type": "number", "minimum": 0},
        "currency": {"enum": ["EUR", "USD", "GBP"]},
        "paid": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 8},
        "address": {"type": "object", "properties": {
            "city": {"type": "string"}, "zip": {"type": "string"}},
            "required": ["city"]},
        "at": {"type": "integer"},
        "padding": {"type": "string"},
    },
    "required": ["id", "customer", "qty", "price", "currency"],
    "additionalProperties": False,
}
CONFIGS = {
    "off": {},
    "id": {"confluent.value.schema.validation": "true"},
    "full": {"confluent.value.schema.validation": "true", "weir.schema.validation": "full"},
}


def payload_file(path, schema_id):
    """Lines of framed JSON documents of about 1 KiB (the id's bytes must be ASCII: the tool
    reads the file as UTF-8)."""
    assert schema_id < 0x80, schema_id
    prefix = "\x00\x00\x00\x00" + chr(schema_id)
    with open(path, "w", encoding="utf-8") as f:
        for i in range(IN_FILE):
            doc = {"id": f"o-{i}", "customer": f"customer-{i % 97}", "qty": i % 1000,
                   "price": (i % 5000) / 100, "currency": ["EUR", "USD", "GBP"][i % 3],
                   "paid": i % 2 == 0, "tags": ["a", "b", f"t{i % 7}"],
                   "address": {"city": "Oslo", "zip": f"{i:05d}"}, "at": 1_700_000_000 + i}
            doc["padding"] = "x" * max(0, 1019 - len(json.dumps(doc)) - 14)
            f.write(prefix + json.dumps(doc, separators=(",", ":")) + "\n")


def register(b):
    req = urllib.request.Request(
        f"{b.registry_url}/subjects/pp-value/versions",
        data=json.dumps({"schema": json.dumps(SCHEMA), "schemaType": "JSON"}).encode(),
        method="POST", headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())["id"]


def refused_batches(b):
    """The broker's count of batches refused by schema validation (/metrics): none, if the
    records are what the schema says."""
    with urllib.request.urlopen(f"http://127.0.0.1:{b.aux_port}/metrics", timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("weir_schema_validation_refused_batches_total"):
                return float(line.split()[-1])
    return None


def run(mode, tag, records, throughput, warmup):
    root = os.path.join(WORK, f"{mode}-{tag}")
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    b = weir_harness.Broker("weir", root, env={"WEIR_WAL_CAPACITY": str(1 << 30)})
    b.start()
    try:
        schema_id = register(b)
        payloads = os.path.join(root, "payloads.txt")
        payload_file(payloads, schema_id)
        r = measure(b, f"{mode}-{tag}", records, throughput, payload_file=payloads,
                    topic_configs=CONFIGS[mode], warmup=warmup)
        r["refused_batches"] = refused_batches(b)
    finally:
        b.stop()
        shutil.rmtree(root, ignore_errors=True)
    r["mode"] = mode
    r["cmd"] = r["cmd"].replace(os.path.join(root, ""), "")
    return r


def report(results, stamp, elapsed):
    def cell(mode, tag, key):
        r = results.get((mode, tag))
        return r.get(key) if isinstance(r, dict) else None

    def ratio(mode, tag, key):
        base, v = cell("off", tag, key), cell(mode, tag, key)
        if not isinstance(base, (int, float)) or not isinstance(v, (int, float)) or not base:
            return "-"
        return f"{v / base:.2f}"

    lines = [f"## Schema validation on produce ({stamp})", "",
             "kafka-clients' ProducerPerformance (acks=all, linger.ms=1, one partition) sending "
             f"the {IN_FILE:,} lines of a payload file: JSON documents of about 1 KiB framed "
             "with schema id 1 (the registry's wire format), valid under the JSON Schema "
             "registered as pp-value. A fresh single Weir broker per run; the topic without "
             "validation (off), with confluent.value.schema.validation=true (id: the id is "
             "registered under the subject), and with weir.schema.validation=full as well "
             f"(every value parsed and validated). Maximum: {MAX_RECORDS:,} records as fast as "
             f"they go; latency: {RATE:,} records/s for {SECONDS} s after {WARMUP} s of the same "
             "in the same JVM (not measured). CPU is the broker's, per "
             "GiB produced. The load generator shares the machine's two cores with the broker.",
             "",
             f"| validation | max MB/s | CPU s/GiB at max | p50 ms at {RATE:,}/s | "
             f"p99 ms at {RATE:,}/s | CPU s/GiB at {RATE:,}/s | CPU at max vs off | "
             f"p99 vs off |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for mode in MODES:
        lines.append(f"| {mode} | " + " | ".join(fmt(x) for x in [
            cell(mode, "max", "mb_per_sec"), cell(mode, "max", "cpu_s_per_gib"),
            cell(mode, "rate", "p50"), cell(mode, "rate", "p99"),
            cell(mode, "rate", "cpu_s_per_gib")]) +
            f" | {ratio(mode, 'max', 'cpu_s_per_gib')} | {ratio(mode, 'rate', 'p99')} |")
    refused = [f"{m} ({t})" for (m, t), r in results.items()
               if isinstance(r, dict) and r.get("refused_batches")]
    if refused:
        lines += ["", "Batches were refused in: " + ", ".join(refused) + " (the figures are "
                  "not of valid records)."]
    failed = [f"{m} ({t}): {r}" for (m, t), r in results.items() if not isinstance(r, dict)]
    if failed:
        lines += ["", "Failed runs: " + "; ".join(failed)]
    cmd = next((r["cmd"] for r in results.values() if isinstance(r, dict)), "")
    lines += ["", f"Command (one run): `{cmd}`; reproduce with `make bench-schema-validation`. "
              f"The whole run took {elapsed:.0f} s.", ""]
    return "\n".join(lines)


def main():
    if "WEIR_BIN" not in os.environ:
        sys.exit("schema_validation.py: set WEIR_BIN to the weir binary")
    os.makedirs(WORK, exist_ok=True)
    os.makedirs(RESULTS, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M")
    t0 = time.monotonic()
    results = {}
    phases = [("max", MAX_RECORDS, -1, 0), ("rate", RATE * SECONDS, RATE, RATE * WARMUP)]
    for tag, records, throughput, warmup in [p for p in phases if p[0] in PHASES]:
        for mode in MODES:
            try:
                results[(mode, tag)] = run(mode, tag, records, throughput, warmup)
            except Exception as e:  # one failure must not lose the other runs
                print(f"bench: {mode} ({tag}) failed: {e}", flush=True)
                results[(mode, tag)] = (str(e).splitlines() or [repr(e)])[0][:200]
    text = report(results, stamp, time.monotonic() - t0)
    write_results(RESULTS, f"schema-validation-{stamp}", text, results,
                  os.environ.get("BENCH_SV_APPEND_TO"))


if __name__ == "__main__":
    main()

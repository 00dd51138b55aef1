#!/usr/bin/env python3
"""What turning topics into Iceberg tables costs and how fast it goes (`make bench-iceberg`).

    WEIR_BIN=target/release/weir bench/iceberg.py

A fresh single Weir broker per run (file WAL, file:// objects, the SQLite catalog), `weir perf`
producing 1 KiB Avro records (`--schema-id`: the wire format's prefix, then a datum of
PerfRecord {sent: fixed(8), data: bytes}, registered in the broker's registry first) to a topic
of BENCH_ICE_PARTITIONS [4] partitions, acks=all, idempotent, one producer.

  steady    BENCH_ICE_MIB [50] MiB/s for BENCH_ICE_SECONDS [30] s after 10 s of warm-up, with
            the topic as a typed table (weir.iceberg.mode=value_schema_id_prefix, target lag
            BENCH_ICE_LAG_MS [10000]) and without (off), alternately, BENCH_ICE_ROUNDS [2]
            rounds: producers' p50/p99 of each run (the spread of the off runs is the
            run-to-run spread), the table's lag (the translator's gauge, age of the oldest
            record not in the table, sampled every 0.5 s) p50/p99/max beside the target, and
            the broker's CPU seconds per GiB produced (until the table has every record) in
            each mode: the difference is translation's.
  backlog   BENCH_ICE_BACKLOG_GIB [5] GiB at least (as fast as they go for the time 5 GiB takes
            at 100 MiB/s: more on a faster broker) produced with the mode off, then
            the mode turned on (target lag 1 s): the time until the table has every record,
            the translation rate and its CPU per GiB; beside it, the rate at which pyarrow
            writes the same rows (the key_value columns with the value's struct) as zstd
            Parquet files in one thread: the limit of a translator that only writes Parquet.
  spark     BENCH_ICE_SPARK [1]: Spark (pyspark, iceberg-spark-runtime from Maven Central, the
            JDBC catalog on the broker's SQLite file) counts the backlog table's rows and sums
            a column, beside pyiceberg's count.

Writes bench/results/iceberg-YYYY-MM-DD-HHMM.md (and .json).
"""

import datetime
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "harness"))
sys.path.insert(0, HERE)

import weir_harness  # noqa: E402
from partitions import write_results  # noqa: E402
from share import cpu_seconds  # noqa: E402

PARTITIONS = int(os.environ.get("BENCH_ICE_PARTITIONS", "4"))
MIB = float(os.environ.get("BENCH_ICE_MIB", "50"))
SECONDS = int(os.environ.get("BENCH_ICE_SECONDS", "30"))
LAG_MS = int(os.environ.get("BENCH_ICE_LAG_MS", "10000"))
ROUNDS = int(os.environ.get("BENCH_ICE_ROUNDS", "2"))
BACKLOG_GIB = float(os.environ.get("BENCH_ICE_BACKLOG_GIB", "5"))
SPARK = os.environ.get("BENCH_ICE_SPARK", "1") == "1"
PHASES = os.environ.get("BENCH_ICE_PHASES", "steady backlog").split()
WORK = os.path.abspath(os.environ.get("BENCH_ICE_DIR", os.path.join(REPO, "target",
                                                                      "bench-iceberg")))
RESULTS = os.path.abspath(os.environ.get("BENCH_ICE_RESULTS", os.path.join(REPO, "bench",
                                                                           "results")))
RECORD = 1024
TOPIC = "ice-0"
SCHEMA = {"type": "record", "name": "PerfRecord", "fields": [
    {"name": "sent", "type": {"type": "fixed", "name": "Sent", "size": 8}},
    {"name": "data", "type": "bytes"}]}
TYPED = {"weir.iceberg.mode": "value_schema_id_prefix"}
SPARK_VERSION = "3.5.7"
ICEBERG_SPARK = "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.1"
SQLITE_JDBC = "org.xerial:sqlite-jdbc:3.50.3.0"


def pct(values, q):
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def broker(tag):
    root = os.path.join(WORK, tag)
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    b = weir_harness.Broker(tag, root, env={"WEIR_WAL_CAPACITY": str(2 << 30),
                                           "WEIR_ICEBERG_INTERVAL_MS": "200"})
    b.kind = "weir"
    b.start()
    return b


def register(b):
    req = urllib.request.Request(
        f"{b.registry_url}/subjects/{TOPIC}-value/versions",
        data=json.dumps({"schema": json.dumps(SCHEMA)}).encode(), method="POST",
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())["id"]


def create_topic(b, configs):
    from confluent_kafka.admin import AdminClient, NewTopic
    a = AdminClient({"bootstrap.servers": b.bootstrap})
    a.create_topics([NewTopic(TOPIC, PARTITIONS, config=configs)])[TOPIC].result(30)


def alter_topic(b, configs):
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType
    a = AdminClient({"bootstrap.servers": b.bootstrap})
    r = ConfigResource(ResourceType.TOPIC, TOPIC, set_config=configs)
    a.alter_configs([r])[r].result(30)


def produced_bytes(b):
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "bench-offsets"})
    try:
        n = sum(c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30)[1]
                for p in range(PARTITIONS))
    finally:
        c.close()
    return n * RECORD


def iceberg_view(b):
    return b.admin("GET", "/v1/iceberg")[1]


def table_done(b, produced_records):
    v = iceberg_view(b)
    return v["records"] >= produced_records and v["topics"].get(TOPIC, {}).get(
        "lag_records", 1) == 0


class LagSampler(threading.Thread):
    def __init__(self, b):
        super().__init__(daemon=True)
        self.b, self.samples, self.halt = b, [], threading.Event()

    def run(self):
        while not self.halt.wait(0.5):
            try:
                t = iceberg_view(self.b)["topics"].get(TOPIC)
            except Exception:  # noqa: BLE001 - a sample missed
                continue
            if t is not None:
                self.samples.append(t["lag_seconds"])


def perf(b, out, rate_mib, seconds, schema_id, warmup="10s"):
    cmd = [os.environ["WEIR_BIN"], "perf", "--bootstrap-servers", b.bootstrap,
           "--topic-prefix", "ice", "--partitions", str(PARTITIONS), "--producers", "1",
           "--groups", "0", "--record-size", str(RECORD), "--schema-id", str(schema_id),
           "--warmup", warmup, "--duration", f"{seconds}s", "--quiet", "--output", out,
           "--producer-config", "enable.idempotence=true", "--producer-config", "linger.ms=5"]
    cmd += ["--throughput-mib", str(rate_mib)] if rate_mib else ["--rate", "0"]
    print("bench: " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        return json.load(f)["summary"], " ".join(["weir", *cmd[1:]]).replace(
            b.bootstrap, "HOST:PORT").replace(os.path.join(WORK, ""), "")


def wait_for_table(b, produced, timeout=900):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if table_done(b, produced // RECORD):
            return True
        time.sleep(0.2)
    return False


def steady(mode, i):
    tag = f"steady-{mode}-{i}"
    b = broker(tag)
    try:
        schema_id = register(b)
        configs = {**TYPED, "weir.iceberg.target.lag.ms": str(LAG_MS)} if mode == "on" else {}
        create_topic(b, configs)
        lag = LagSampler(b)
        lag.start()
        cpu0, t0 = cpu_seconds(b.pid), time.monotonic()
        summary, cmd = perf(b, os.path.join(WORK, tag, "perf.json"), MIB, SECONDS, schema_id)
        produced = produced_bytes(b)
        complete = wait_for_table(b, produced) if mode == "on" else True
        cpu = cpu_seconds(b.pid) - cpu0
        elapsed = time.monotonic() - t0
        lag.halt.set()
        lat = summary["produce_latency_ms"]
        view = iceberg_view(b)
        return {"mode": mode, "p50": lat.get("p50"), "p99": lat.get("p99"),
                "mib_per_sec": summary["produce"]["mib_per_sec"],
                "cpu_s_per_gib": cpu / (produced / (1 << 30)), "gib": produced / (1 << 30),
                "lag_p50": pct(lag.samples, .5), "lag_p99": pct(lag.samples, .99),
                "lag_max": max(lag.samples) if lag.samples else None,
                "complete": complete, "elapsed": elapsed, "cmd": cmd,
                "files": view.get("files"), "commits": view.get("commits"),
                "file_bytes": view.get("file_bytes")}
    finally:
        b.stop()
        shutil.rmtree(os.path.join(WORK, tag), ignore_errors=True)


def parquet_limit(rows_wanted):
    """Rows of the typed table's columns written by pyarrow as zstd Parquet, 64 MiB at a
    time (a translator's batch), one thread: rows/s and MiB/s of record values."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    batch_rows = (64 << 20) // RECORD
    value = pa.struct([("sent", pa.binary(8)), ("data", pa.large_binary())])
    header = pa.struct([("key", pa.string()), ("value", pa.large_binary())])
    schema = pa.schema([("partition", pa.int32()), ("offset", pa.int64()),
                        ("timestamp", pa.timestamp("us", tz="UTC")), ("key", pa.large_binary()),
                        ("value", value), ("headers", pa.list_(header))])
    data = os.urandom(RECORD + 4096)
    sent = [data[i % 4096:i % 4096 + 8] for i in range(batch_rows)]
    body = [data[i % 4096:i % 4096 + RECORD - 16] for i in range(batch_rows)]
    now = int(time.time() * 1_000_000)
    table = pa.table([pa.array([i % PARTITIONS for i in range(batch_rows)], pa.int32()),
                      pa.array(range(batch_rows), pa.int64()),
                      pa.array([now + i for i in range(batch_rows)], pa.timestamp("us", tz="UTC")),
                      pa.array([None] * batch_rows, pa.large_binary()),
                      pa.StructArray.from_arrays([pa.array(sent, pa.binary(8)),
                                                  pa.array(body, pa.large_binary())],
                                                 fields=list(value)),
                      pa.array([[]] * batch_rows, pa.list_(header))], schema=schema)
    out = os.path.join(WORK, "parquet-limit")
    os.makedirs(out, exist_ok=True)
    done, t = 0, 0.0
    n = 0
    while done < rows_wanted:
        t0 = time.perf_counter()
        pq.write_table(table, os.path.join(out, f"{n}.parquet"), compression="zstd")
        t += time.perf_counter() - t0
        done += batch_rows
        n += 1
        os.remove(os.path.join(out, f"{n - 1}.parquet"))
    return {"rows": done, "seconds": t, "mib_per_sec": done * RECORD / (1 << 20) / t}


def spark_read(b, rows_expected):
    """Spark's JdbcCatalog on the broker's SQLite file: the row count and a sum."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q",
                        "--disable-pip-version-check", "--root-user-action=ignore",
                        f"pyspark=={SPARK_VERSION}"], check=True)
    script = os.path.join(WORK, "spark_read.py")
    with open(script, "w") as f:
        f.write(f"""
import json, sys, time
from pyspark.sql import SparkSession
t0 = time.monotonic()
s = (SparkSession.builder.master("local[2]")
     .config("spark.jars.packages", "{ICEBERG_SPARK},{SQLITE_JDBC}")
     .config("spark.sql.extensions",
             "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
     .config("spark.sql.catalog.weir", "org.apache.iceberg.spark.SparkCatalog")
     .config("spark.sql.catalog.weir.type", "jdbc")
     .config("spark.sql.catalog.weir.uri", "jdbc:sqlite:{os.path.join(b.data_dir, 'meta.sqlite')}")
     .config("spark.sql.catalog.weir.warehouse", "file://{os.path.join(b.data_dir, 'objects', 'iceberg')}")
     .config("spark.driver.memory", "2g").config("spark.ui.enabled", "false")
     .getOrCreate())
started = time.monotonic() - t0
t1 = time.monotonic()
row = s.sql("SELECT count(*) AS n, sum(length(value.data)) AS bytes, "
            "count(DISTINCT partition) AS partitions FROM weir.kafka.`{TOPIC.replace('.', '_')}`").collect()[0]
print(json.dumps({{"rows": row["n"], "value_bytes": row["bytes"], "partitions": row["partitions"],
                  "start_s": started, "query_s": time.monotonic() - t1}}))
""")
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    r = subprocess.run([sys.executable, script], capture_output=True, text=True, env=env,
                       timeout=1800)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if r.returncode != 0 or not lines:
        return {"error": (r.stderr or r.stdout)[-400:]}
    out = json.loads(lines[-1])
    out["expected"] = rows_expected
    return out


def backlog():
    tag = "backlog"
    b = broker(tag)
    try:
        schema_id = register(b)
        create_topic(b, {})
        # As fast as they go, long enough for the backlog (at 100 MiB/s; less if slower).
        seconds = max(10, int(BACKLOG_GIB * 1024 / 100))
        summary, cmd = perf(b, os.path.join(WORK, tag, "perf.json"), 0, seconds, schema_id,
                            warmup="0s")
        produced = produced_bytes(b)
        cpu0, t0 = cpu_seconds(b.pid), time.monotonic()
        alter_topic(b, {**TYPED, "weir.iceberg.target.lag.ms": "1000"})
        complete = wait_for_table(b, produced, timeout=3600)
        elapsed = time.monotonic() - t0
        cpu = cpu_seconds(b.pid) - cpu0
        gib = produced / (1 << 30)
        view = iceberg_view(b)
        out = {"gib": gib, "produce_mib_per_sec": summary["produce"]["mib_per_sec"],
               "seconds": elapsed, "complete": complete,
               "mib_per_sec": produced / (1 << 20) / elapsed, "cpu_s_per_gib": cpu / gib,
               "files": view.get("files"), "file_bytes": view.get("file_bytes"),
               "commits": view.get("commits"), "cmd": cmd}
        out["parquet"] = parquet_limit(min(produced // RECORD, (1 << 30) // RECORD))
        if SPARK:
            out["spark"] = spark_read(b, produced // RECORD)
        return out
    finally:
        b.stop()
        shutil.rmtree(os.path.join(WORK, tag), ignore_errors=True)


def fmt(x, digits=1):
    if isinstance(x, (int, float)):
        return f"{x:,.{digits}f}"
    return "-" if x is None else str(x)


def report(results, stamp, elapsed):
    lines = [f"## Topics as Iceberg tables ({stamp})", "",
             f"One Weir broker per run (file WAL, file:// objects, SQLite catalog); `weir perf` "
             f"producing 1 KiB Avro records (schema-id prefix; PerfRecord {{sent: fixed(8), data: "
             f"bytes}}) to {PARTITIONS} partitions, acks=all, idempotent. The load generator "
             "shares the machine's two cores with the broker.", ""]
    runs = [r for k, r in results.items() if k[0] == "steady" and isinstance(r, dict)]
    if runs:
        lines += [f"### {MIB:g} MiB/s for {SECONDS} s, typed table (target lag "
                  f"{LAG_MS / 1000:g} s) or not", "",
                  "| run | produce MiB/s | p50 ms | p99 ms | CPU s/GiB | table lag p50 / p99 / "
                  "max s | files | commits |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for r in runs:
            lagc = ("-" if r["mode"] == "off" else
                    f"{fmt(r['lag_p50'])} / {fmt(r['lag_p99'])} / {fmt(r['lag_max'])}")
            lines.append(f"| {r['mode']} | {fmt(r['mib_per_sec'])} | {fmt(r['p50'])} | "
                         f"{fmt(r['p99'])} | {fmt(r['cpu_s_per_gib'])} | {lagc} | "
                         f"{fmt(r['files'], 0) if r['mode'] == 'on' else '-'} | "
                         f"{fmt(r['commits'], 0) if r['mode'] == 'on' else '-'} |")
        off = [r for r in runs if r["mode"] == "off"]
        on = [r for r in runs if r["mode"] == "on"]
        if off and on:
            mean = lambda rs, k: sum(r[k] for r in rs) / len(rs)  # noqa: E731
            spread = (max(r["p99"] for r in off) - min(r["p99"] for r in off))
            lines += ["", f"Translation's CPU: {fmt(mean(on, 'cpu_s_per_gib') - mean(off, 'cpu_s_per_gib'), 2)} "
                      f"s per GiB ({fmt(mean(on, 'cpu_s_per_gib') / mean(off, 'cpu_s_per_gib'), 2)}x "
                      f"the broker's without a table). Producers' p99 with a table "
                      f"{fmt(mean(on, 'p99'))} ms, without {fmt(mean(off, 'p99'))} ms; the off "
                      f"runs' spread {fmt(spread)} ms. Table lag p99 "
                      f"{fmt(max(r['lag_p99'] or 0 for r in on))} s at a target of "
                      f"{LAG_MS / 1000:g} s (the translator's gauge: the age of the oldest "
                      "record not in the table, at each cycle's start, sampled every 0.5 s)."]
    bl = results.get(("backlog", 0))
    if isinstance(bl, dict):
        pl = bl["parquet"]
        lines += ["", f"### A backlog of {fmt(bl['gib'], 2)} GiB translated", "",
                  f"Produced at {fmt(bl['produce_mib_per_sec'])} MiB/s with the mode off, then "
                  f"`weir.iceberg.mode=value_schema_id_prefix`: the table had every record "
                  f"after {fmt(bl['seconds'])} s: **{fmt(bl['mib_per_sec'])} MiB/s** of record "
                  f"values, {fmt(bl['cpu_s_per_gib'], 2)} broker CPU s per GiB, "
                  f"{bl['files']} files ({fmt((bl['file_bytes'] or 0) / (1 << 20))} MiB), "
                  f"{bl['commits']} commits. pyarrow writing the same rows as zstd Parquet "
                  f"(64 MiB batches, one thread, no decoding, no catalog): "
                  f"{fmt(pl['mib_per_sec'])} MiB/s, so translation runs at "
                  f"{fmt(bl['mib_per_sec'] / pl['mib_per_sec'], 2)}x that limit."]
        sp = bl.get("spark")
        if sp:
            if "error" in sp:
                lines += ["", f"Spark could not read the table: `{sp['error'][-200:]}`"]
            else:
                lines += ["", f"Spark {SPARK_VERSION} ({ICEBERG_SPARK}, the JDBC catalog on the "
                          f"broker's SQLite file) counted {sp['rows']:,} rows (expected "
                          f"{sp['expected']:,}) in {sp['partitions']} partitions, "
                          f"{fmt(sp['value_bytes'] / (1 << 20))} MiB of `value.data`, in "
                          f"{fmt(sp['query_s'])} s (session start {fmt(sp['start_s'])} s)."]
    failed = [f"{k}: {r}" for k, r in results.items() if not isinstance(r, dict)]
    if failed:
        lines += ["", "Failed runs: " + "; ".join(failed)]
    cmd = next((r["cmd"] for r in results.values() if isinstance(r, dict)), "")
    lines += ["", f"Command (one run): `{cmd}`; reproduce with `make bench-iceberg`. The whole "
              f"run took {elapsed:.0f} s.", ""]
    return "\n".join(lines)


def main():
    if "WEIR_BIN" not in os.environ:
        sys.exit("iceberg.py: set WEIR_BIN to the weir binary")
    os.makedirs(WORK, exist_ok=True)
    os.makedirs(RESULTS, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M")
    t0 = time.monotonic()
    results = {}
    if "steady" in PHASES:
        for i in range(ROUNDS):
            for mode in ("off", "on"):
                try:
                    results[("steady", f"{mode}-{i}")] = steady(mode, i)
                except Exception as e:  # one failure must not lose the other runs
                    print(f"bench: steady {mode} {i} failed: {e}", flush=True)
                    results[("steady", f"{mode}-{i}")] = str(e)[:200]
    if "backlog" in PHASES:
        try:
            results[("backlog", 0)] = backlog()
        except Exception as e:  # noqa: BLE001
            print(f"bench: backlog failed: {e}", flush=True)
            results[("backlog", 0)] = str(e)[:200]
    text = report(results, stamp, time.monotonic() - t0)
    write_results(RESULTS, f"iceberg-{stamp}", text, results)


if __name__ == "__main__":
    main()

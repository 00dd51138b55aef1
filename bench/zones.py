#!/usr/bin/env python3
"""Zones: latency for clients in and out of the leader's zone, and the bytes that cross zones,
beside Apache Kafka with follower fetching (`make bench-zones`).

    WEIR_BIN=target/release/weir bench/zones.py

Three brokers, one per zone (az1, az2, az3). Every topic of BENCH_Z_PARTITIONS partitions is led
by the broker of az1. Two `weir perf` runs go at once, each on a topic of its own: one client
pair (an idempotent producer, acks=all, linger.ms=5, and a consumer group) in az1, the leader's
zone, and one in az2; BENCH_Z_RATE records/s of 1 KiB each, BENCH_Z_WARMUP of warm-up,
BENCH_Z_DURATION measured.

  weir file in-zone     file WAL, `weir.zone.routing=in-zone` (the default): the az2 client
                        produces and fetches through the az2 broker, by way of object storage
  weir file leader      file WAL, `weir.zone.routing=leader`: straight to the leader, as Kafka
  weir object in-zone   the object WAL (`weir.wal.kind=object`), in-zone
  weir object leader    the object WAL, straight to the leader
  kafka rack-aware      Apache Kafka 4.1, three brokers (one KRaft controller), racks az1..az3,
                        replication factor 3, min.insync.replicas 2, RackAwareReplicaSelector;
                        consumers set client.rack (KIP-392: they fetch from the replica of their
                        zone); producers go to the leader (Kafka has nothing else)

Weir's clients are placed by the `weir_az=` tag in client.id; Weir runs on one private
PostgreSQL and s3s-fs. Weir's cross-zone bytes come from its meters (weir_net_bytes_total over
the three brokers, over the whole run: warm-up too); Kafka has no such meter, so its figure is
counted from the topology (every byte produced replicated to two other zones; a producer outside
the leader's zone sends its bytes across once; consumers read in their zone). The dollars are
the cross-zone line of a month at 1 GiB/s produced and read once, at $0.02/GB (bytes scale with
throughput); for Weir also the object-store requests per second of the run and their monthly cost
at that rate ($0.005 per 1,000 PUTs, $0.0004 per 1,000 GETs; requests scale with time as much as
with bytes, so they are not scaled to 1 GiB/s), and the mean latency of a hand-off (sealed to
answered), of a PUT and of a GET, from the brokers' meters.

Environment (defaults in brackets):
  WEIR_BIN                   the weir binary (required)
  BENCH_Z_RATE [500]         records/s per client pair (1 KiB records); Kafka's three JVMs on
                             this 2-core machine fall behind at 1,000 (latency grows to seconds)
  BENCH_Z_PARTITIONS [4]
  BENCH_Z_WARMUP [5s]  BENCH_Z_DURATION [20s]
  BENCH_Z_CONFIGS ["weir-file-in-zone weir-file-leader weir-object-in-zone weir-object-leader kafka"]
  BENCH_Z_STORES ["s3 file"]  Weir's object store: s3s-fs, and a directory the brokers share
                             (file://, no HTTP: s3s-fs does not set TCP_NODELAY, so about half of
                             its GET responses wait 40 ms for a delayed ACK)
  BENCH_Z_DIR [target/bench-zones]   data dirs and logs (emptied first)
  BENCH_Z_RESULTS [bench/results]
  BENCH_Z_APPEND_TO          also append the section to this report (make bench does)
"""

import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "harness"))

import weir_harness  # noqa: E402  (the harness: Cluster)

RATE = int(os.environ.get("BENCH_Z_RATE", "500"))
PARTITIONS = int(os.environ.get("BENCH_Z_PARTITIONS", "4"))
WARMUP = os.environ.get("BENCH_Z_WARMUP", "5s")
DURATION = os.environ.get("BENCH_Z_DURATION", "20s")
CONFIGS = os.environ.get(
    "BENCH_Z_CONFIGS",
    "weir-file-in-zone weir-file-leader weir-object-in-zone weir-object-leader kafka").split()
STORES = os.environ.get("BENCH_Z_STORES", "s3 file").split()
WORK = os.path.abspath(os.environ.get("BENCH_Z_DIR", os.path.join(REPO, "target", "bench-zones")))
RESULTS = os.path.abspath(os.environ.get("BENCH_Z_RESULTS", os.path.join(REPO, "bench", "results")))
KAFKA_SH = os.path.join(REPO, "tools", "kafka", "kafka.sh")
PRODUCER = ["enable.idempotence=true", "acks=all", "linger.ms=5",
            "max.in.flight.requests.per.connection=5"]
ZONES = ["az1", "az2", "az3"]
GIB = float(1 << 30)
MONTH_GIB = 30 * 86400  # GiB in a month at 1 GiB/s
GB_PER_GIB = GIB / 1e9
CROSS_PRICE, PUT_PRICE, GET_PRICE = 0.02, 0.005 / 1000, 0.0004 / 1000
NET = re.compile(r'^weir_net_bytes_total\{src_zone="([^"]*)",dst_zone="([^"]*)",kind="([^"]*)"\} (\S+)$')


def scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        m = NET.match(line)
        if m:
            key = ("net", m[1], m[2], m[3])
            out[key] = out.get(key, 0.0) + float(m[4])
        elif line.startswith("weir_object_requests_total{"):
            name, v = line.rsplit(" ", 1)
            out[name] = out.get(name, 0.0) + float(v)
        elif line.startswith("weir_produce_bytes_total "):
            out["produced"] = out.get("produced", 0.0) + float(line.split()[-1])
        elif re.match(r"weir_(handoff|object_put_latency|object_get_latency)_seconds_(sum|count) ",
                      line):
            name, v = line.split()
            out[name] = out.get(name, 0.0) + float(v)
    return out


def scrape_all(ports):
    total = {}
    for p in ports:
        for k, v in scrape(p).items():
            total[k] = total.get(k, 0.0) + v
    return total


def diff(after, before):
    return {k: v - before.get(k, 0.0) for k, v in after.items()}


def perf(bootstrap, prefix, zone, root, kafka):
    """One `weir perf` client pair in `zone`; returns (process, output path, command)."""
    out = os.path.join(root, f"{prefix}.json")
    if kafka:
        producer_id = consumer_id = f"perf-{zone}"
        consumer_extra = [f"client.rack={zone}"]
    else:
        producer_id = consumer_id = f"perf-{zone},weir_az={zone}"
        consumer_extra = []
    cmd = [os.environ["WEIR_BIN"], "perf", "--bootstrap-servers", bootstrap,
           "--topic-prefix", prefix, "--partitions", str(PARTITIONS), "--producers", "1",
           "--groups", "1", "--consumers", "1", "--record-size", "1024", "--rate", str(RATE),
           "--warmup", WARMUP, "--duration", DURATION, "--quiet", "--output", out,
           "--producer-config", f"client.id={producer_id}",
           "--consumer-config", f"client.id={consumer_id}"]
    for c in PRODUCER:
        cmd += ["--producer-config", c]
    for c in consumer_extra:
        cmd += ["--consumer-config", c]
    print("bench: " + " ".join(cmd), flush=True)
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL), out, " ".join(cmd[1:])


def summary(path):
    with open(path) as f:
        s = json.load(f)["summary"]
    lat, e2e = s.get("produce_latency_ms") or {}, s.get("e2e_latency_ms") or {}
    return {"mib": s["produce"]["mib_per_sec"], "p50": lat.get("p50"), "p99": lat.get("p99"),
            "e2e50": e2e.get("p50"), "e2e99": e2e.get("p99")}


def run_pairs(bootstrap, tag, root, kafka=False):
    procs = [perf(bootstrap, f"{tag}-{z}", z, root, kafka) for z in ("az1", "az2")]
    for p, _, _ in procs:
        if p.wait() != 0:
            raise RuntimeError(f"weir perf failed ({tag})")
    return {z: summary(out) for z, (_, out, _) in zip(("az1", "az2"), procs)}, \
        [cmd for _, _, cmd in procs]


def admin_post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.read()


def weir_topics(cluster, tag, wal, routing):
    """Creates the two topics of a configuration and moves every partition to broker 1 (az1)."""
    from confluent_kafka.admin import AdminClient, NewTopic
    a = AdminClient({"bootstrap.servers": cluster.bootstrap})
    names = [f"{tag}-{z}-0" for z in ("az1", "az2")]
    fs = a.create_topics([NewTopic(n, num_partitions=PARTITIONS, replication_factor=1,
                                   config={"weir.wal.kind": wal, "weir.zone.routing": routing})
                          for n in names], operation_timeout=30)
    for f in fs.values():
        f.result(timeout=30)
    admin_post(cluster.brokers[0].aux_port, "/v1/reassignments",
               {"partitions": [{"topic": n, "partition": p, "broker": 1}
                               for n in names for p in range(PARTITIONS)]})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        md = a.list_topics(timeout=10)
        if all(md.topics[n].partitions[p].leader == 1 for n in names for p in range(PARTITIONS)):
            return
        time.sleep(0.2)
    raise RuntimeError(f"{tag}: partitions did not move to broker 1")


def weir_runs(configs, store="s3"):
    root = os.path.join(WORK, f"weir-{store}")
    os.makedirs(root, exist_ok=True)
    cluster = weir_harness.Cluster("bench-zones", root, size=3,
                               env={"WEIR_WAL_CAPACITY": str(1 << 30)}, zones=ZONES)
    if store == "file":
        # One directory every broker of this machine shares: objects without HTTP.
        shared = os.path.join(root, "objects")
        os.makedirs(shared, exist_ok=True)
        cluster.object_store_url = f"file://{shared}"
    cluster.launch()
    ports = [b.aux_port for b in cluster.brokers]
    results = []
    try:
        for config in configs:
            _, wal, *routing = config.split("-")
            routing = "-".join(routing)
            tag = f"z-{wal}-{routing}"
            weir_topics(cluster, tag, wal, routing)
            before = scrape_all(ports)
            cost_out = {}

            def cost():
                # What `weir cost` says from broker 2's meters (the az2 broker) mid-run.
                time.sleep(6)
                r = subprocess.run([os.environ["WEIR_BIN"], "cost", "--metrics-url",
                                    f"http://127.0.0.1:{cluster.brokers[1].aux_port}/metrics",
                                    "--window", "10s"], capture_output=True, text=True)
                cost_out["text"] = r.stdout.strip() or r.stderr.strip()

            t = threading.Thread(target=cost)
            t.start()
            t0 = time.monotonic()
            lat, cmds = run_pairs(cluster.bootstrap, tag, root)
            elapsed = time.monotonic() - t0
            t.join()
            d = diff(scrape_all(ports), before)
            results.append({"config": f"{config} ({'s3s-fs' if store == 's3' else 'file://'})",
                            "lat": lat, "cmds": cmds, "meters": d,
                            "elapsed": elapsed, "cost": cost_out.get("text", "")})
    finally:
        cluster.cleanup()
    return results


def kafka_run():
    root = os.path.join(WORK, "kafka")
    os.makedirs(root, exist_ok=True)
    p = weir_harness.free_ports(4)
    common = ["--prop", "replica.selector.class="
              "org.apache.kafka.common.replica.RackAwareReplicaSelector",
              "--prop", "offsets.topic.replication.factor=3",
              "--prop", "default.replication.factor=3", "--prop", "min.insync.replicas=2"]
    env = {**os.environ, "KAFKA_HEAP_OPTS": "-Xms512m -Xmx512m"}
    dirs = [os.path.join(root, f"n{i}") for i in (1, 2, 3)]
    started = []
    try:
        subprocess.run([KAFKA_SH, "start", "--data-dir", dirs[0], "--port", str(p[0]),
                        "--controller-port", str(p[1]), "--prop", "broker.rack=az1", *common],
                       check=True, env=env)
        started.append(dirs[0])
        with open(os.path.join(dirs[0], "logs", "meta.properties")) as f:
            cid = re.search(r"cluster\.id=(\S+)", f.read())[1]
        for i, port in ((2, p[2]), (3, p[3])):
            subprocess.run([KAFKA_SH, "start", "--data-dir", dirs[i - 1], "--port", str(port),
                            "--node-id", str(i), "--join", str(p[1]), "--cluster-id", cid,
                            "--prop", f"broker.rack=az{i}", *common], check=True, env=env)
            started.append(dirs[i - 1])
        bootstrap = f"127.0.0.1:{p[0]},127.0.0.1:{p[2]},127.0.0.1:{p[3]}"
        for z in ("az1", "az2"):
            assignment = ",".join(["1:2:3", "1:3:2"][i % 2] for i in range(PARTITIONS))
            subprocess.run([KAFKA_SH, "tool", "org.apache.kafka.tools.TopicCommand",
                            "--bootstrap-server", bootstrap, "--create", "--topic",
                            f"z-kafka-{z}-0", "--replica-assignment", assignment],
                           check=True, capture_output=True)
        lat, cmds = run_pairs(bootstrap, "z-kafka", root, kafka=True)
    finally:
        for d in started:
            subprocess.run([KAFKA_SH, "stop", "--data-dir", d], env=env)
    return {"config": "kafka", "lat": lat, "cmds": cmds}


def fmt(v, digits=1):
    if v is None:
        return "-"
    return f"{v:,.{digits}f}"


def weir_costs(r):
    m = r["meters"]
    produced = m.get("produced", 0.0)
    data = other = 0.0
    for k, v in m.items():
        if k[0] != "net" or not (k[1] != k[2] or k[1] == "unknown"):
            continue
        if k[3] in ("produce", "fetch"):
            data += v
        else:
            other += v
    puts = m.get('weir_object_requests_total{kind="put"}', 0.0) + \
        m.get('weir_object_requests_total{kind="multipart_part"}', 0.0)
    gets = m.get('weir_object_requests_total{kind="get"}', 0.0)
    secs = r["elapsed"]
    mean = lambda n: (1000 * m.get(n + "_seconds_sum", 0.0) / m[n + "_seconds_count"]
                      if m.get(n + "_seconds_count") else None)
    return {"data_per_byte": data / produced if produced else None,
            # Data bytes scale with throughput: their month at 1 GiB/s.
            "data_dollars": data / produced * MONTH_GIB * GB_PER_GIB * CROSS_PRICE
            if produced else None,
            # The rest (offsets feed, forwarded references, group and metadata traffic) scales
            # with requests and partitions more than with bytes: per second of this run.
            "other_per_sec": other / secs,
            "requests_per_sec": (puts + gets) / secs,
            "request_dollars": (puts * PUT_PRICE + gets * GET_PRICE) / secs * 30 * 86400,
            "handoff_ms": mean("weir_handoff"), "put_ms": mean("weir_object_put_latency"),
            "get_ms": mean("weir_object_get_latency")}


def main():
    if not os.environ.get("WEIR_BIN"):
        raise SystemExit("zones.py: set WEIR_BIN to the weir binary")
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M")
    weir_configs = [c for c in CONFIGS if c.startswith("weir-")]
    results = [r for store in STORES for r in (weir_runs(weir_configs, store)
                                               if weir_configs else [])]
    if "kafka" in CONFIGS:
        results.append(kafka_run())
    lines = [f"# Zones: latency in and out of the leader's zone, and cross-zone bytes ({stamp})",
             "",
             f"Three brokers, one per zone; every partition led in az1. A client pair (idempotent "
             f"producer, acks=all, linger.ms=5; one consumer group) in az1 and one in az2, "
             f"{RATE:,} records/s of 1 KiB each, {PARTITIONS} partitions per topic; {WARMUP} "
             "warm-up, {DURATION} measured. Weir on one PostgreSQL and s3s-fs; Kafka 4.1 with "
             "replication factor 3, min.insync.replicas 2 and follower fetching "
             "(RackAwareReplicaSelector, client.rack).".replace("{DURATION}", DURATION), "",
             "| configuration | az1 produce p50 / p99 ms | az1 end-to-end p50 / p99 ms "
             "| az2 produce p50 / p99 ms | az2 end-to-end p50 / p99 ms "
             "| cross-zone data bytes per byte produced | their $/month at 1 GiB/s "
             "| other cross-zone KiB/s (feed, references, groups) "
             "| object requests/s (PUT+GET), $/month at this rate "
             "| hand-off / PUT / GET mean ms |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        a, b = r["lat"]["az1"], r["lat"]["az2"]
        if r["config"] == "kafka":
            # Half the bytes come from each client: both replicate to two zones, the az2
            # producer's cross once more; consumers read in their zone.
            per = 2.0 + 0.5
            costs = f"{per:.2f} (by topology) | " \
                f"{fmt(per * MONTH_GIB * GB_PER_GIB * CROSS_PRICE, 0)} | - | - | - |"
        else:
            c = weir_costs(r)
            costs = f"{fmt(c['data_per_byte'], 4)} | {fmt(c['data_dollars'], 0)} | " \
                f"{fmt(c['other_per_sec'] / 1024, 1)} | {fmt(c['requests_per_sec'], 0)}, " \
                f"{fmt(c['request_dollars'], 0)} | {fmt(c['handoff_ms'])} / " \
                f"{fmt(c['put_ms'])} / {fmt(c['get_ms'])} |"
        lines.append(f"| {r['config']} | {fmt(a['p50'])} / {fmt(a['p99'])} | "
                     f"{fmt(a['e2e50'])} / {fmt(a['e2e99'])} | {fmt(b['p50'])} / {fmt(b['p99'])} "
                     f"| {fmt(b['e2e50'])} / {fmt(b['e2e99'])} | {costs}")
    lines += ["", "Cross-zone bytes for Weir: what weir_net_bytes_total counted between different "
              "zones over the whole run (warm-up included); data is the produce and fetch kinds, "
              "over the bytes produced. A month at 1 GiB/s is 2,592,000 GiB.", ""]
    for r in results:
        if r.get("cost"):
            lines += [f"`weir cost` from the az2 broker's meters during {r['config']} "
                      "(10 s window; one broker's share):", "", "```", r["cost"], "```", ""]
            break
    lines += ["Reproduce: `WEIR_BIN=target/release/weir python3 bench/zones.py` "
              "(make bench-zones). Commands:", ""]
    for r in results:
        lines += [f"- {r['config']}: `{c}`" for c in r["cmds"]]
    text = "\n".join(lines) + "\n"
    print("\n" + text)
    os.makedirs(RESULTS, exist_ok=True)
    path = os.path.join(RESULTS, f"zones-{stamp}.md")
    with open(path, "w") as f:
        f.write(text)
    print(f"wrote {path}")
    extra = os.environ.get("BENCH_Z_APPEND_TO")
    if extra:
        with open(extra, "a") as f:
            f.write("\n" + text.replace("# Zones", "## Zones", 1))


if __name__ == "__main__":
    main()

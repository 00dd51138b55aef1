#!/usr/bin/env python3
"""The monitoring kit (deploy/grafana, deploy/prometheus) against real brokers and a real Prometheus.

    WEIR_BIN=target/debug/weir python3 tests/deploy/monitoring.py

1. `promtool check rules` and `promtool test rules` on deploy/prometheus (each alert's firing
   condition has a unit test).
2. Every meter the dashboard and the alert rules name is registered by a broker
   (`GET /v1/meters`): a renamed meter fails here, not on an operator's empty panel.
3. A three-broker cluster in three zones (the test cluster of tests/harness) under load: an
   idempotent producer on a topic of each WAL kind (one of them an Iceberg table), a consumer
   group committing as it reads.
   Prometheus (Debian's package) scrapes the brokers every 2 s with the alert rules loaded; every
   query of every panel of the dashboard must return a series with a number (not NaN), and every
   alert rule must evaluate without error.

Exits non-zero with what failed. Needs prometheus and promtool on $PATH (or $PROMETHEUS,
$PROMTOOL), s3s-fs, PostgreSQL 15 and confluent-kafka, as the cluster tests do.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "harness"))

import weir_harness  # noqa: E402  (the test cluster)

DASHBOARD = os.path.join(REPO, "deploy", "grafana", "weir-overview.json")
RULES = os.path.join(REPO, "deploy", "prometheus", "weir-alerts.yaml")
RULE_TESTS = os.path.join(REPO, "deploy", "prometheus", "weir-alerts-test.yaml")
PROMETHEUS = os.environ.get("PROMETHEUS", "prometheus")
PROMTOOL = os.environ.get("PROMTOOL", "promtool")
LOAD_SECONDS = float(os.environ.get("MONITORING_LOAD_SECONDS", "40"))
RATE = 200
# What Grafana puts in place of its variables, for queries run straight against Prometheus.
GRAFANA_VARIABLES = {"$job": "weir", "$__rate_interval": "20s", "$__range": "5m"}


def check_rules():
    for args in (["check", "rules", RULES], ["test", "rules", RULE_TESTS]):
        out = subprocess.run([PROMTOOL, *args], capture_output=True, text=True)
        print(f"promtool {' '.join(args[:2])}: {out.stdout.strip().splitlines()[-1]}")
        if out.returncode != 0:
            raise SystemExit(f"promtool {' '.join(args)} failed:\n{out.stdout}{out.stderr}")


def dashboard_queries():
    """(panel title, legend, expr) of every query of every panel."""
    with open(DASHBOARD) as f:
        dash = json.load(f)
    out = []
    for p in dash["panels"]:
        for t in p.get("targets", []):
            out.append((p["title"], t.get("legendFormat", ""), t["expr"]))
    return out


def alert_exprs():
    import yaml
    with open(RULES) as f:
        rules = yaml.safe_load(f)
    return [(r["alert"], r["expr"]) for g in rules["groups"] for r in g["rules"]]


METER = re.compile(r"\b((?:weir|process)_[a-z0-9_]+)\b")


def meters_named(exprs):
    names = set()
    for e in exprs:
        for m in METER.findall(e):
            names.add(re.sub(r"_bucket$", "", m))
    return names


def load(bootstrap, stop, errors):
    """An idempotent producer on both topics, a group reading and committing."""
    from confluent_kafka import Consumer, Producer
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "monitoring",
                  "auto.offset.reset": "earliest", "enable.auto.commit": True,
                  "auto.commit.interval.ms": 1000})
    c.subscribe(["mon-file", "mon-object"])
    i, start = 0, time.monotonic()
    while not stop.is_set():
        # RATE records a second to each topic.
        while i < (time.monotonic() - start) * RATE:
            for topic in ("mon-file", "mon-object"):
                p.produce(topic, value=b"x" * 512, key=str(i % 97).encode())
            i += 1
        p.poll(0)
        m = c.poll(0.01)
        if m is not None and m.error():
            errors.append(str(m.error()))
    p.flush(30)
    c.close()


def create_topics(bootstrap):
    from confluent_kafka.admin import AdminClient, NewTopic
    a = AdminClient({"bootstrap.servers": bootstrap})
    # mon-file is an Iceberg table too (the dashboard's Iceberg panels).
    fs = a.create_topics([NewTopic("mon-file", 6, config={"weir.iceberg.mode": "key_value",
                                                         "weir.iceberg.target.lag.ms": "2000"}),
                          NewTopic("mon-object", 6, config={"weir.wal.kind": "object"})])
    for f in fs.values():
        f.result(30)


def prometheus_config(root, admin_ports):
    path = os.path.join(root, "prometheus.yml")
    targets = ", ".join(f'"127.0.0.1:{p}"' for p in admin_ports)
    with open(path, "w") as f:
        f.write(f"""global:
  scrape_interval: 2s
  evaluation_interval: 2s
rule_files: ["{RULES}"]
scrape_configs:
  - job_name: weir
    static_configs:
      - targets: [{targets}]
""")
    return path


def query(port, expr):
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise RuntimeError(f"{expr}: {body}")
    return body["data"]["result"]


def numbers(result):
    """The values of a query's series that are numbers (not NaN, not infinite)."""
    out = []
    for s in result:
        v = float(s["value"][1])
        if v == v and abs(v) != float("inf"):
            out.append(v)
    return out


def substitute(expr):
    for k, v in GRAFANA_VARIABLES.items():
        expr = expr.replace(k, v)
    return expr


def main():
    check_rules()
    queries = dashboard_queries()
    alerts = alert_exprs()
    print(f"dashboard: {len({q[0] for q in queries})} panels, {len(queries)} queries; "
          f"alert rules: {len(alerts)}")
    root = tempfile.mkdtemp(prefix="weir-monitoring-")
    os.chmod(root, 0o711)  # PostgreSQL may run as another user, under this directory
    os.makedirs(os.path.join(root, "cluster"))
    cluster = weir_harness.Cluster(
        "monitoring", os.path.join(root, "cluster"), size=3, zones=["a", "b", "c"],
        env={"WEIR_BROKER_GROUP_OFFSETS_METER_INTERVAL_MS": "1000",
             "WEIR_STORAGE_UPLOAD_INTERVAL_MS": "500"})
    prom = None
    failures = []
    try:
        cluster.launch()
        admin_ports = [b.aux_port for b in cluster.brokers]
        registered = set()
        for m in cluster.brokers[0].admin("GET", "/v1/meters")[1]["meters"]:
            registered.add(m["name"])
        named = meters_named([q[2] for q in queries] + [a[1] for a in alerts])
        unknown = sorted(named - registered)
        print(f"meters named by the dashboard and the alerts: {len(named)}, "
              f"not registered: {unknown or 'none'}")
        if unknown:
            failures.append(f"meters not registered by the broker: {unknown}")

        create_topics(cluster.bootstrap)
        stop, errors = threading.Event(), []
        loader = threading.Thread(target=load, args=(cluster.bootstrap, stop, errors))
        loader.start()
        port = weir_harness.free_port()
        prom = subprocess.Popen(
            [PROMETHEUS, f"--config.file={prometheus_config(root, admin_ports)}",
             f"--storage.tsdb.path={os.path.join(root, 'tsdb')}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            stdout=open(os.path.join(root, "prometheus.log"), "w"), stderr=subprocess.STDOUT)
        time.sleep(LOAD_SECONDS)
        print(f"load: {LOAD_SECONDS:.0f} s on 3 brokers in zones a, b, c; "
              f"client errors: {len(errors)}")

        width = max(len(f"{t} / {l}") for t, l, _ in queries)
        for title, legend, expr in queries:
            result = query(port, substitute(expr))
            nums = numbers(result)
            what = f"{title} / {legend}"
            shown = f"{len(result)} series, e.g. {nums[0]:.4g}" if nums else f"{len(result)} series, no number"
            print(f"  {'ok  ' if nums else 'FAIL'} {what:<{width}}  {shown}")
            if not nums:
                failures.append(f"panel {title!r} ({legend}): no data for {substitute(expr)}")

        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/rules", timeout=10) as r:
            groups = json.load(r)["data"]["groups"]
        rules = [r for g in groups for r in g["rules"]]
        bad = [f"{r['name']}: {r.get('lastError')}" for r in rules if r.get("health") != "ok"]
        states = {}
        for r in rules:
            states[r.get("state", "?")] = states.get(r.get("state", "?"), 0) + 1
        print(f"alert rules evaluated by Prometheus: {len(rules)}, health not ok: "
              f"{bad or 'none'}; states {states}")
        if len(rules) != len(alerts):
            failures.append(f"Prometheus loaded {len(rules)} rules of {len(alerts)}")
        failures.extend(f"rule {b}" for b in bad)
        stop.set()
        loader.join(60)
    finally:
        if prom is not None:
            prom.terminate()
            prom.wait(30)
        cluster.cleanup()
        if failures:
            print(f"kept {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    if failures:
        print("\nFAILED:\n" + "\n".join(failures), file=sys.stderr)
        raise SystemExit(1)
    print("monitoring: every panel has data, every alert rule evaluates")


if __name__ == "__main__":
    main()

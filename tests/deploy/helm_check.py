#!/usr/bin/env python3
"""The Helm chart (deploy/helm/weir), checked without a cluster; and the systemd unit and the
compose file beside it.

    python3 tests/deploy/helm_check.py        # needs helm ($HELM), kubernetes-validate, promtool,
                                              # systemd-analyze

For every scenario in deploy/helm/weir/ci/*-values.yaml: `helm lint --strict`, then `helm
template`, every object of Kubernetes' own kinds validated against Kubernetes' schemas offline
(kubernetes-validate --strict, which bundles them), the PrometheusRule's rules checked by
promtool, and what the scenario is for asserted on the objects (a StatefulSet on a shared
ReadWriteMany volume for the file WAL, a Deployment with no volume for the object WAL, SASL_SSL
with TLS and ACLs, zones spread and passed to each broker). Then what must be refused is:
values without the metadata store's Secret, and values the schema forbids. The systemd unit is
verified by `systemd-analyze verify`; the compose file is checked for what it must wire (the
image `make image` builds, the stores' URLs, a stop grace period). Exits non-zero with what
failed.
"""

import glob
import os
import shutil
import subprocess
import sys
import tempfile

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
CHART = os.path.join(REPO, "deploy", "helm", "weir")
# `go install helm.sh/helm/v4/cmd/helm` puts it in ~/go/bin, often not on $PATH.
HELM = os.environ.get("HELM") or shutil.which("helm") or os.path.expanduser("~/go/bin/helm")
PROMTOOL = os.environ.get("PROMTOOL", "promtool")
KUBERNETES_VERSION = os.environ.get("KUBERNETES_VERSION", "1.33.0")
# Kinds of custom resources the chart may render (their schemas are not Kubernetes'):
# the PrometheusRule's rules go through promtool; the others are checked for their fields here.
CUSTOM = {"ServiceMonitor", "PrometheusRule", "ScaledObject"}

failures = []


def fail(what):
    failures.append(what)
    print(f"  FAIL {what}")


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def render(values_files, extra=()):
    cmd = [HELM, "template", "weir", CHART, "--namespace", "streaming"]
    for v in values_files:
        cmd += ["-f", v]
    return run(cmd + list(extra))


def container(objs):
    w = [o for o in objs if o["kind"] in ("StatefulSet", "Deployment")]
    return w[0], w[0]["spec"]["template"]["spec"]["containers"][0]


def env(c):
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c.get("env", [])}


def expect(cond, what):
    if cond:
        print(f"  ok   {what}")
    else:
        fail(what)


def scenario_checks(name, objs):
    kinds = [o["kind"] for o in objs]
    w, c = container(objs)
    e = env(c)
    expect(c["securityContext"].get("readOnlyRootFilesystem") and
           w["spec"]["template"]["spec"]["securityContext"].get("runAsNonRoot"),
           "non-root, read-only root filesystem")
    expect(all(p in c for p in ("readinessProbe", "livenessProbe", "startupProbe")) and
           c["readinessProbe"]["httpGet"]["path"] == "/readyz", "probes on /readyz and /healthz")
    expect("PodDisruptionBudget" in kinds, "a PodDisruptionBudget")
    services = [o for o in objs if o["kind"] == "Service" and o["spec"].get("clusterIP") != "None"]
    expect(e.get("WEIR_SCHEMA_REGISTRY_LISTEN") == "0.0.0.0:8081" and
           any(p["name"] == "registry" for p in c["ports"]) and
           any(p["name"] == "registry" for p in services[0]["spec"]["ports"]),
           "the schema registry on port 8081, in the clients' Service")
    if name.startswith("file-wal") or name.startswith("sasl"):
        expect(w["kind"] == "StatefulSet", "file WAL: a StatefulSet")
        vols = {v["name"]: v for v in w["spec"]["template"]["spec"]["volumes"]}
        expect("persistentVolumeClaim" in vols.get("shared", {}), "file WAL: the shared volume mounted")
        expect(e.get("WEIR_WAL_PATH", "").startswith("/var/lib/weir/shared/"),
               "file WAL: each WAL file on the shared volume, at the same path on every broker")
        pvcs = [o for o in objs if o["kind"] == "PersistentVolumeClaim"]
        if name.startswith("file-wal"):
            expect(pvcs and pvcs[0]["spec"]["accessModes"] == ["ReadWriteMany"],
                   "file WAL: the chart's claim is ReadWriteMany")
    if name.startswith("object-wal") or name.startswith("zones"):
        expect(w["kind"] == "Deployment", "object WAL: a Deployment")
        expect(e.get("WEIR_WAL_KIND") == "object" and "PersistentVolumeClaim" not in kinds,
               "object WAL: no volume claim")
    if name.startswith("sasl"):
        expect(e.get("WEIR_SECURITY_LISTENERS", "").startswith("SASL_SSL://"), "SASL_SSL listener")
        expect(e.get("WEIR_SECURITY_AUTHORIZER") == "acl", "ACLs on")
        expect(e.get("WEIR_SCHEMA_REGISTRY_AUTHENTICATION") == "basic" and
               e.get("WEIR_SCHEMA_REGISTRY_TLS") == "true",
               "the schema registry over HTTPS with HTTP Basic")
        expect(any(v["name"] == "tls" for v in w["spec"]["template"]["spec"]["volumes"]),
               "TLS Secret mounted")
        expect(not any(o["kind"] == "Secret" for o in objs), "every Secret named by the user")
        expect("NetworkPolicy" in kinds, "a NetworkPolicy")
    if name.startswith("zones"):
        spread = w["spec"]["template"]["spec"].get("topologySpreadConstraints", [])
        expect(spread and spread[0]["topologyKey"] == "topology.kubernetes.io/zone",
               "zones: brokers spread over zones")
        expect(e.get("WEIR_BROKER_ZONE") == "auto" and "NODE_NAME" in e,
               "zones: each broker finds its zone from its node")
        roles = [o for o in objs if o["kind"] == "ClusterRole"]
        expect(roles and roles[0]["rules"][0]["resources"] == ["nodes"], "zones: may read nodes")
    if name.startswith("file-wal"):
        expect("HorizontalPodAutoscaler" in kinds, "an autoscaler (HPA)")
        expect({"ServiceMonitor", "PrometheusRule"} <= set(kinds), "ServiceMonitor and PrometheusRule")
    if name.startswith("object-wal"):
        expect("ScaledObject" in kinds, "an autoscaler (KEDA)")


def validate(name, text, tmp):
    objs = [o for o in yaml.safe_load_all(text) if o]
    builtin = [o for o in objs if o["kind"] not in CUSTOM]
    path = os.path.join(tmp, f"{name}.yaml")
    with open(path, "w") as f:
        yaml.safe_dump_all(builtin, f)
    r = run(["kubernetes-validate", "--strict", "-k", KUBERNETES_VERSION, path])
    bad = [l for l in (r.stdout + r.stderr).splitlines() if "INFO" not in l and l.strip()]
    expect(r.returncode == 0, f"{len(builtin)} objects valid against Kubernetes {KUBERNETES_VERSION}'s schemas"
           + ("" if r.returncode == 0 else ":\n" + "\n".join(bad[:20])))
    for o in objs:
        if o["kind"] == "PrometheusRule":
            rules = os.path.join(tmp, f"{name}-rules.yaml")
            with open(rules, "w") as f:
                yaml.safe_dump(o["spec"], f)
            r = run([PROMTOOL, "check", "rules", rules])
            expect(r.returncode == 0, "PrometheusRule's rules pass promtool check rules")
        elif o["kind"] == "ServiceMonitor":
            ep = o["spec"]["endpoints"][0]
            expect(ep["port"] == "admin" and ep["path"] == "/metrics" and "authorization" in ep,
                   "ServiceMonitor scrapes /metrics on the admin port with the token")
        elif o["kind"] == "ScaledObject":
            t = o["spec"]["triggers"][0]
            expect(t["type"] == "prometheus" and "weir_cluster_load_ratio" in t["metadata"]["query"],
                   "ScaledObject scales on weir_cluster_load_ratio")
    return objs


def check_systemd(tmp):
    unit = os.path.join(REPO, "deploy", "systemd", "weir.service")
    with open(unit) as f:
        text = f.read()
    # verify wants ExecStart's program to exist: a stand-in at the path the unit names.
    stand_in = os.path.join(tmp, "weir")
    with open(stand_in, "w") as f:
        f.write("#!/bin/sh\n")
    os.chmod(stand_in, 0o755)
    copy = os.path.join(tmp, "weir.service")
    with open(copy, "w") as f:
        f.write(text.replace("/usr/local/bin/weir", stand_in))
    r = run(["systemd-analyze", "verify", copy])
    problems = [l for l in (r.stdout + r.stderr).splitlines() if "weir.service" in l]
    expect(r.returncode == 0 and not problems,
           "systemd unit: systemd-analyze verify" + ("" if not problems else ":\n" + "\n".join(problems)))
    expect("KillSignal=SIGTERM" in text and "TimeoutStopSec=" in text,
           "systemd unit: SIGTERM with time for the controlled shutdown")


def check_compose():
    with open(os.path.join(REPO, "deploy", "compose", "compose.yaml")) as f:
        c = yaml.safe_load(f)
    with open(os.path.join(REPO, "Cargo.toml")) as f:
        version = next(l.split('"')[1] for l in f if l.startswith("version ="))
    w = c["services"]["weir"]
    expect(w["image"] == f"localhost/weir:{version}", f"compose: the image make image builds ({w['image']})")
    e = w["environment"]
    expect(e["WEIR_METADATA_URL"].startswith("postgres://") and "@postgres:" in e["WEIR_METADATA_URL"]
           and e["WEIR_OBJECT_STORE_URL"].startswith("s3://") and e["AWS_ENDPOINT"] == "http://minio:9000",
           "compose: the broker wired to PostgreSQL and MinIO")
    expect("127.0.0.1:8081:8081" in w["ports"], "compose: the schema registry on the host's loopback")
    expect(set(w["depends_on"]) == {"postgres", "bucket"} and "stop_grace_period" in w,
           "compose: starts after its stores, with time to stop")


def main():
    scenarios = sorted(glob.glob(os.path.join(CHART, "ci", "*-values.yaml")))
    with open(os.path.join(REPO, "deploy", "prometheus", "weir-alerts.yaml")) as a, \
            open(os.path.join(CHART, "files", "weir-alerts.yaml")) as b:
        expect(a.read() == b.read(), "the chart's alert rules are deploy/prometheus/weir-alerts.yaml")
    with tempfile.TemporaryDirectory() as tmp:
        for path in scenarios:
            name = os.path.basename(path)[:-len("-values.yaml")]
            print(f"scenario {name}:")
            r = run([HELM, "lint", "--strict", CHART, "-f", path])
            expect(r.returncode == 0, "helm lint --strict" + ("" if r.returncode == 0 else ":\n" + r.stdout + r.stderr))
            r = render([path])
            if r.returncode != 0:
                fail(f"helm template: {r.stderr}")
                continue
            scenario_checks(name, validate(name, r.stdout, tmp))
        print("refused:")
        r = render([])
        expect(r.returncode != 0 and "wal.sharedVolume" in r.stderr,
               "the default file WAL without a shared volume, with a clear message")
        r = render([], ["--set", "wal.kind=object", "--set", "objectStore.url=s3://b/p"])
        expect(r.returncode != 0 and "metadata.existingSecret is required" in r.stderr,
               "values without the metadata store's Secret, with a clear message")
        r = render([scenarios[0]], ["--set", "wal.kind=disk"])
        expect(r.returncode != 0 and "/wal/kind" in r.stderr, "wal.kind=disk (the schema)")
        r = render([scenarios[0]], ["--set", "config.broker_zone=a"])
        expect(r.returncode != 0, "a config key not named WEIR_* (the schema)")
        r = render([os.path.join(CHART, "ci", "object-wal-values.yaml")],
                   ["--set", "listeners.protocol=SASL_SSL"])
        expect(r.returncode != 0 and "tls.existingSecret" in r.stderr, "SASL_SSL without TLS")
        print("beside the chart:")
        check_systemd(tmp)
        check_compose()
    if failures:
        print(f"\nFAILED ({len(failures)}):\n" + "\n".join(failures), file=sys.stderr)
        raise SystemExit(1)
    print(f"helm chart: {len(scenarios)} scenarios linted, rendered and validated")


if __name__ == "__main__":
    main()

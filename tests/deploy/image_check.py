#!/usr/bin/env python3
"""The container image (deploy/container), started as a user would start it.

    python3 tests/deploy/image_check.py IMAGE      # make image builds it

A private PostgreSQL and s3s-fs (tests/harness) beside it, then the image run with podman
(`--network host`, runc, the settings in deploy/container/containers.conf) as a non-root user,
configured only by WEIR_* variables, with its data directory a volume: it must answer /healthz
and /readyz, take 2,000 records from an idempotent producer and give them back to a consumer,
stop on SIGTERM (`podman stop`) with exit status 0, and, started again as a new container on the
same stores, give back the same records. Prints the image's size.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "harness"))

import weir_harness  # noqa: E402

RECORDS = 2000


def podman(*args, check=True, timeout=120):
    env = {**os.environ}
    env.setdefault("CONTAINERS_CONF", os.path.join(REPO, "deploy", "container", "containers.conf"))
    r = subprocess.run(["podman", *args], capture_output=True, text=True, env=env, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"podman {' '.join(args)}: {r.stderr.strip()}")
    return r


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status
    except Exception:  # noqa: BLE001 - not up yet
        return None


def run_broker(image, name, env, volume, kafka, admin, registry):
    args = ["run", "--detach", "--name", name, "--network", "host", "--volume", f"{volume}:/var/lib/weir"]
    for k, v in env.items():
        args += ["--env", f"{k}={v}"]
    args += ["--env", f"WEIR_BROKER_LISTEN=127.0.0.1:{kafka}",
             "--env", f"WEIR_BROKER_ADMIN_LISTEN=127.0.0.1:{admin}",
             # The host's network: the registry on a free port, not Confluent's.
             "--env", f"WEIR_SCHEMA_REGISTRY_LISTEN=127.0.0.1:{registry}", image]
    podman(*args)
    deadline = time.monotonic() + 60
    while get(f"http://127.0.0.1:{admin}/readyz") != 200:
        if time.monotonic() > deadline:
            logs = podman("logs", name, check=False)
            raise RuntimeError(f"{name} not ready in 60 s:\n{logs.stdout[-3000:]}{logs.stderr[-3000:]}")
        time.sleep(0.25)


def stop_broker(name):
    t = time.monotonic()
    podman("stop", "--time", "60", name, timeout=120)
    status = json.loads(podman("inspect", name).stdout)[0]["State"]["ExitCode"]
    logs = podman("logs", name, check=False)
    podman("rm", name, check=False)
    return status, time.monotonic() - t, logs.stderr + logs.stdout


def produce(bootstrap):
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    acked = []
    for i in range(RECORDS):
        p.produce("image-check", value=f"r{i}".encode(),
                  on_delivery=lambda e, m: acked.append(m.value()) if e is None else None)
        p.poll(0)
    p.flush(60)
    return acked


def consume(bootstrap):
    from confluent_kafka import Consumer
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"image-{time.time()}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe(["image-check"])
    got, deadline = [], time.monotonic() + 60
    while len(got) < RECORDS and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value())
    c.close()
    return got


def main():
    image = sys.argv[1]
    size = int(podman("image", "inspect", image, "--format", "{{.Size}}").stdout.strip())
    user = podman("image", "inspect", image, "--format", "{{.Config.User}}").stdout.strip()
    print(f"image {image}: {size / 1048576:.1f} MiB, user {user}")
    root = tempfile.mkdtemp(prefix="weir-image-")
    os.chmod(root, 0o711)
    pg, s3 = weir_harness.PgServer(os.path.join(root, "pg")), weir_harness.S3sFs(os.path.join(root, "s3"))
    volume = f"weir-image-check-{os.getpid()}"
    failures = []
    try:
        os.makedirs(os.path.join(root, "s3"))
        pg.start()
        url = pg.create_database("weir")
        s3.start()
        env = {"WEIR_METADATA_URL": url, "WEIR_OBJECT_STORE_URL": "s3://weir-test/image",
               "WEIR_WAL_CAPACITY": str(64 << 20), **s3.env()}
        kafka, admin, registry = weir_harness.free_ports(3)
        bootstrap = f"127.0.0.1:{kafka}"
        run_broker(image, "weir-image-1", env, volume, kafka, admin, registry)
        health = get(f"http://127.0.0.1:{admin}/healthz")
        print(f"started: /healthz {health}, /readyz 200")
        if health != 200:
            failures.append(f"/healthz answered {health}")
        subjects = get(f"http://127.0.0.1:{registry}/subjects")
        print(f"schema registry: GET /subjects {subjects}")
        if subjects != 200:
            failures.append(f"the schema registry answered GET /subjects with {subjects}")
        acked = produce(bootstrap)
        got = consume(bootstrap)
        print(f"produced {len(acked)} acknowledged of {RECORDS}, consumed {len(got)}")
        if len(acked) != RECORDS or sorted(got) != sorted(acked):
            failures.append(f"records: {len(acked)} acknowledged, {len(got)} read back")
        status, took, logs = stop_broker("weir-image-1")
        print(f"podman stop (SIGTERM): exit status {status} after {took:.1f} s")
        if status != 0:
            failures.append(f"exit status {status} after SIGTERM:\n{logs[-2000:]}")
        run_broker(image, "weir-image-2", env, volume, kafka, admin, registry)
        again = consume(bootstrap)
        print(f"a new container on the same stores: read back {len(again)} of {len(acked)}")
        if sorted(again) != sorted(acked):
            failures.append(f"after the restart: {len(again)} records of {len(acked)}")
        status, _, logs = stop_broker("weir-image-2")
        if status != 0:
            failures.append(f"second container: exit status {status}:\n{logs[-2000:]}")
    finally:
        for name in ("weir-image-1", "weir-image-2"):
            podman("rm", "--force", name, check=False)
        podman("volume", "rm", "--force", volume, check=False)
        s3.kill()
        pg.stop()
        shutil.rmtree(root, ignore_errors=True)
    if failures:
        print("FAILED:\n" + "\n".join(failures), file=sys.stderr)
        raise SystemExit(1)
    print("image: serves, stops cleanly on SIGTERM, and its data outlives the container")


if __name__ == "__main__":
    main()

"""The test cluster as a program, for harnesses in any language and for `make cluster`:

    python3 tests/harness/weir_harness ports N
    python3 tests/harness/weir_harness cluster [--brokers 3] [--dir DIR] [--zones a,b]
                                               [--env KEY=VALUE ...] [--keep]
                                               [--base-port P] [--admin-base-port P]

`ports N` prints N free loopback ports as a JSON list: the port rule of every harness
(`free_ports` in this package), for servers a harness in another language starts itself. Ports
are not handed out twice to the processes that share $WEIR_HARNESS_PORTS_FILE.

`cluster` starts a private PostgreSQL, an s3s-fs and N `weir serve` ($WEIR_BIN) on free loopback
ports (the same rule) or the ones given, prints one line of JSON on stdout once every broker is
ready:

    {"bootstrap": "127.0.0.1:P1,...", "metadata_url": "postgres://...",
     "object_store_url": "s3://weir-test/weir", "s3_env": {"AWS_ENDPOINT": ...},
     "postgres_port": P, "s3_port": P, "dir": "...",
     "brokers": [{"node_id": 1, "host": "127.0.0.1", "port": P, "admin_port": P, "pid": N,
                  "data_dir": "...", "log": "...", "zone": ""}, ...]}

and runs until its standard input closes (the caller exited or closed the pipe) or it gets
SIGTERM or SIGINT; then it stops the brokers, s3s-fs and PostgreSQL and removes DIR (kept with
--keep). Progress goes to standard error.

While it runs, a line on standard input acts on one broker (N counts from 0, in the order of
"brokers"), and is answered with one line of JSON, the cluster as above after the change, or
{"error": "..."}:

    stop N     SIGTERM, and wait until it exited (a controlled shutdown); an error if its exit
               status was not 0
    kill N     SIGKILL
    start N    start it again (same node id, ports and data directory)
    add        start one more broker, with the next node id
    describe   nothing; the answer is the cluster as it is
"""

import argparse
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import weir_harness  # noqa: E402


def describe(c):
    return {
        "bootstrap": c.bootstrap,
        "metadata_url": c.metadata_url,
        "object_store_url": c.object_store_url,
        "s3_env": c.s3.env(),
        "postgres_port": c.pg.port,
        "s3_port": c.s3.port,
        "dir": c.root,
        "brokers": [{
            "node_id": b.node_id,
            "host": b.host,
            "port": b.port,
            "admin_port": b.aux_port,
            "pid": b.pid,
            "data_dir": b.data_dir,
            "log": b.log_path,
            "zone": getattr(b, "zone", ""),
        } for b in c.brokers],
    }


def act(c, line):
    """Carries out one command line; returns the answer."""
    words = line.split()
    if not words:
        return None
    verb, rest = words[0], words[1:]
    if verb == "add" and not rest:
        with contextlib.redirect_stdout(sys.stderr):
            c.add_broker()
    elif verb in ("stop", "kill", "start") and len(rest) == 1 and rest[0].isdigit():
        i = int(rest[0])
        if i >= len(c.brokers):
            return {"error": f"no broker {i}: there are {len(c.brokers)}"}
        with contextlib.redirect_stdout(sys.stderr):
            status = getattr(c, verb)(i)
        if verb == "stop" and status:
            return {"error": f"broker {i} exited with status {status} after SIGTERM (not 0)"}
    elif verb != "describe" or rest:
        return {"error": f"unknown command {line.strip()!r}: stop N, kill N, start N, add, "
                         "describe"}
    return describe(c)


def serve_commands(c, done):
    """Answers command lines until standard input closes."""
    for line in sys.stdin:
        try:
            answer = act(c, line)
        except Exception as e:  # noqa: BLE001 - the caller hears of it and goes on
            answer = {"error": f"{line.strip()}: {e}"}
        if answer is not None:
            print(json.dumps(answer), flush=True)
    done.set()


def cluster(args):
    root = args.dir or tempfile.mkdtemp(prefix="weir-cluster-")
    os.makedirs(root, exist_ok=True)
    env = dict(kv.split("=", 1) for kv in args.env)
    zones = [z for z in (args.zones or "").split(",") if z]
    c = weir_harness.Cluster("cluster", root, size=args.brokers, env=env, zones=zones,
                             base_port=args.base_port, admin_base_port=args.admin_base_port)
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    try:
        with contextlib.redirect_stdout(sys.stderr):
            c.launch()
        print(json.dumps(describe(c)), flush=True)
        # The caller's end of stdin closes when it exits, however it exits.
        threading.Thread(target=serve_commands, args=(c, done), daemon=True).start()
        done.wait()
    finally:
        with contextlib.redirect_stdout(sys.stderr):
            c.cleanup()
        if args.keep:
            print(f"kept {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(prog="weir_harness", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("cluster", help="start a cluster and print its endpoints as JSON")
    p.add_argument("--brokers", type=int, default=3)
    p.add_argument("--dir", help="where its state goes (default: a new temporary directory)")
    p.add_argument("--zones", help="comma-separated zones, broker n in zone (n-1) mod count")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                   help="an environment variable for every broker (WEIR_* settings)")
    p.add_argument("--keep", action="store_true", help="keep DIR when stopping")
    p.add_argument("--base-port", type=int,
                   help="broker n's Kafka port is BASE_PORT + n - 1 (default: free ports)")
    p.add_argument("--admin-base-port", type=int,
                   help="broker n's admin port is ADMIN_BASE_PORT + n - 1 (default: free ports)")
    p = sub.add_parser("ports", help="print N free loopback ports as a JSON list")
    p.add_argument("n", type=int)
    args = ap.parse_args()
    if args.command == "cluster":
        cluster(args)
    elif args.command == "ports":
        print(json.dumps(weir_harness.free_ports(args.n)), flush=True)


if __name__ == "__main__":
    main()

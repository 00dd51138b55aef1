#!/usr/bin/env python3
"""What a cluster costs its PostgreSQL: statements and transactions per second while idle, and
per GiB produced, by kind of statement, with the brokers' CPU.

    WEIR_BIN=target/release/weir bench/pg_cost.py        (or: make bench-pg-cost)
    bench/pg_cost.py OLD/weir NEW/weir                    (before and after, in one run)

Three brokers (`weir serve`, the harness's cluster) share a private PostgreSQL 15 started with
pg_stat_statements, and one s3s-fs. One topic of BENCH_PGC_PARTITIONS partitions is made and
every partition given a leader; after BENCH_PGC_SETTLE_S the statistics are reset and the
cluster is left idle for BENCH_PGC_IDLE_S: statements (pg_stat_statements' calls), transactions
(pg_stat_database's commits and rollbacks) and each broker's CPU (from /proc) over that window.
Then `weir perf` produces BENCH_PGC_LOAD_MIB MiB at BENCH_PGC_RATE_MIB MiB/s (1 KiB records,
acks=all, one consumer group) to a topic of 16 partitions made before the window, and the same
figures are divided by the GiB produced.

Environment: WEIR_BIN (without arguments), BENCH_PGC_PARTITIONS [10000], BENCH_PGC_IDLE_S [60],
BENCH_PGC_SETTLE_S [30], BENCH_PGC_LOAD_MIB [1024] (0: no load phase), BENCH_PGC_RATE_MIB [20],
BENCH_PGC_TOP [15] (statement kinds listed), BENCH_PGC_OUT (the report; by default
bench/results/pg-cost-DATE.md).
"""

import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "harness"))
sys.path.insert(0, HERE)

import weir_harness  # noqa: E402  (the harness: Cluster)
import partitions  # noqa: E402  (create_topic, proc_sample)

PARTITIONS = int(os.environ.get("BENCH_PGC_PARTITIONS", "10000"))
IDLE_S = float(os.environ.get("BENCH_PGC_IDLE_S", "60"))
SETTLE_S = float(os.environ.get("BENCH_PGC_SETTLE_S", "30"))
LOAD_MIB = int(os.environ.get("BENCH_PGC_LOAD_MIB", "1024"))
RATE_MIB = float(os.environ.get("BENCH_PGC_RATE_MIB", "20"))
TOP = int(os.environ.get("BENCH_PGC_TOP", "15"))


def psql(pg, sql):
    """Rows of `sql` in the cluster's database, as lists of strings."""
    return pg.sql(sql)


def reset(pg):
    psql(pg, "SELECT pg_stat_statements_reset(); SELECT pg_stat_reset();")


def xacts(pg):
    [[commits, rollbacks]] = psql(
        pg, "SELECT xact_commit, xact_rollback FROM pg_stat_database WHERE datname = 'weir'")
    return int(commits) + int(rollbacks)


def statements(pg):
    """(calls, total ms, query) of every statement kind the brokers ran (user weir), most
    called first; psql's own statements left out."""
    rows = psql(pg, "SELECT calls, total_exec_time, regexp_replace(query, '\\s+', ' ', 'g') "
                    "FROM pg_stat_statements s JOIN pg_roles r ON r.oid = s.userid "
                    "WHERE r.rolname = 'weir' AND query NOT LIKE '%pg_stat%' "
                    "ORDER BY calls DESC")
    return [(int(c), float(ms), q) for c, ms, q in rows]


def cpu(cluster):
    return sum(partitions.proc_sample(b.pid)[0] for b in cluster.brokers)


def window(cluster, work):
    """Runs `work()` with the statistics reset before it; returns its figures."""
    time.sleep(1.5)  # the statistics collector's last flush before the reset
    reset(cluster.pg)
    c0, t0 = cpu(cluster), time.monotonic()
    work()
    wall = time.monotonic() - t0
    c1 = cpu(cluster)
    time.sleep(1.5)  # backends report their transactions at most every 500 ms (idle ones later)
    return {"wall": wall, "cpu": c1 - c0, "stmts": statements(cluster.pg),
            "xacts": xacts(cluster.pg)}


# What each kind of statement is for, by a fragment of its text (the first that matches).
PURPOSES = [
    ("UPDATE brokers SET expires_ms", "session renewal (each broker every 500 ms)"),
    ("WITH renewed AS", "controller lease: renewed by its holder, read by the others"),
    ("SELECT EXISTS (SELECT", "controller: any session lapsed? (before a fencing transaction)"),
    ("UPDATE brokers SET state", "controller: fencing lapsed sessions"),
    ("START TRANSACTION", "transactions (the statements in them are listed apart)"),
    ("COMMIT", "transactions"),
    ("FROM partitions p LEFT JOIN assignments", "every assignment: controller and views, on changes"),
    ("FROM brokers b", "brokers: controller and views, on changes"),
    ("SELECT wal_id", "WALs and their recovery: controller and views"),
    ("FROM kv WHERE key", "settings: drains (views), CIDR map (every 5 s), group configs"),
    ("SELECT node_id, epoch FROM controller", "views: who is the controller"),
    ("SELECT t.name, t.topic_id", "the catalog: topics, re-read on a new view"),
    ("FROM client_quotas", "client quotas, on announced changes"),
    ("FROM links", "cluster links, on announced changes"),
    ("FROM transactions", "transaction check (timeouts, expired ids)"),
    ("broker_loads (node_id", "load report for the balancer"),
    ("FROM broker_loads", "balancer: every broker's load"),
    ("SELECT incarnation, state FROM brokers", "a broker's incarnation checked in its write"),
    ("INSERT INTO group_offsets", "consumer offset commits"),
    ("group_states", "consumer group state"),
    ("INSERT INTO objects", "upload: an object's row"),
    ("UPDATE objects SET", "upload or cleanup: an object's state"),
    ("SELECT $ FROM objects", "upload: the object is still pending"),
    ("INSERT INTO ranges", "upload: the ranges an object holds"),
    ("UPDATE streams SET end_offset", "upload: a stream's committed end"),
    ("FROM streams WHERE stream_id", "a stream's offsets (upload commit, open)"),
    ("SELECT DISTINCT object_id FROM ranges", "upload: objects left unreferenced"),
    ("FROM ranges r", "a stream's ranges (reads from object storage, compaction, retention)"),
    ("producer_snapshots", "idempotent producers' state, when a partition opens or uploads"),
    ("assignments SET", "a partition move (balancer, operator)"),
    ("pg_notify", "announcing a cluster change"),
    ("FROM controller WHERE id", "controller lease, in a transaction"),
]


def purpose(query):
    return next((why for frag, why in PURPOSES if frag in query), "")


def short(query, width=110):
    q = re.sub(r"\$\d+", "$", query)
    return q if len(q) <= width else q[:width - 1] + "…"


def table(figures, per, unit):
    """Markdown rows of the top statement kinds, `per` dividing the calls."""
    total = sum(c for c, _, _ in figures["stmts"])
    lines = [f"| statements {unit} | share | ms each | for | statement |",
             "|---:|---:|---:|---|---|"]
    for calls, ms, q in figures["stmts"][:TOP]:
        lines.append(f"| {calls / per:,.2f} | {calls / max(total, 1):.1%} | "
                     f"{ms / max(calls, 1):.3f} | {purpose(q)} | `{short(q, 70).replace('|', '/')}` |")
    rest = figures["stmts"][TOP:]
    if rest:
        lines.append(f"| {sum(c for c, _, _ in rest) / per:,.2f} | | | | {len(rest)} other kinds |")
    return "\n".join(lines)


def measure(weir):
    """One cluster of `weir` brokers: the report's lines for it, and its one-line figures."""
    with weir_harness.work_dir("weir-pg-cost-") as root:
        return measure_in(weir, root)


def measure_in(weir, root):
    cluster = weir_harness.Cluster("pg-cost", root, env={"WEIR_WAL_CAPACITY": str(256 << 20)},
                                   binary=weir)
    cluster.pg.options = "-c shared_preload_libraries=pg_stat_statements"
    report, lines = [f"## {weir}", ""], []
    try:
        cluster.launch()
        psql(cluster.pg, "CREATE EXTENSION pg_stat_statements")
        partitions.create_topic(cluster.bootstrap, "pg-cost", PARTITIONS)
        time.sleep(SETTLE_S)
        idle = window(cluster, lambda: time.sleep(IDLE_S))
        n = sum(c for c, _, _ in idle["stmts"])
        summary = (f"idle, 3 brokers, {PARTITIONS:,} partitions, {idle['wall']:.0f} s: "
                   f"{n / idle['wall']:.1f} statements/s, {idle['xacts'] / idle['wall']:.1f} "
                   f"transactions/s, brokers' CPU {idle['cpu'] / idle['wall'] / 3:.4f} cores "
                   "each")
        print(summary, flush=True)
        lines.append(summary)
        report += ["### Idle", "", summary, "", table(idle, idle["wall"], "/s"), ""]
        if LOAD_MIB:
            records = LOAD_MIB * 1024
            duration = LOAD_MIB / RATE_MIB
            # The topic is made before the window: its creation's announcements are not load.
            partitions.create_topic(cluster.bootstrap, "pgc-load-0", 16)
            time.sleep(5)

            def load():
                subprocess.run([weir, "perf", "--bootstrap-servers", cluster.bootstrap,
                                "--topic-prefix", "pgc-load", "--partitions", "16",
                                "--throughput-mib", str(RATE_MIB), "--warmup", "0s",
                                "--duration", f"{duration:.0f}s", "--report-interval", "30s"],
                               check=True, timeout=duration + 600)

            loaded = window(cluster, load)
            gib = records * 1024 / (1 << 30)
            n = sum(c for c, _, _ in loaded["stmts"])
            summary = (f"{RATE_MIB:g} MiB/s produced and consumed ({gib:.2f} GiB, 16 partitions, "
                       f"{loaded['wall']:.0f} s, the idle topic beside): {n / gib:,.0f} statements "
                       f"and {loaded['xacts'] / gib:,.0f} transactions per GiB "
                       f"({n / loaded['wall']:.1f} statements/s); brokers' CPU "
                       f"{loaded['cpu'] / gib:.2f} s per GiB")
            print(summary, flush=True)
            lines.append(summary)
            report += ["### Under load", "", summary, "", table(loaded, gib, "per GiB"), ""]
    finally:
        cluster.cleanup()
    return report, lines


def main():
    binaries = sys.argv[1:] or [os.environ.get("WEIR_BIN")]
    if not all(binaries):
        raise SystemExit("bench/pg_cost.py: name the weir binaries, or set WEIR_BIN")
    stamp = time.strftime("%Y-%m-%d-%H%M")
    out = os.environ.get("BENCH_PGC_OUT",
                         os.path.join(HERE, "results", f"pg-cost-{stamp}.md"))
    sections, summary = [], ["## Summary", ""]
    for weir in binaries:
        report, lines = measure(weir)
        sections += report
        summary += [f"- `{weir}`: {line}" for line in lines]
    settings = " ".join(f"{k}={v}" for k, v in sorted(os.environ.items())
                        if k.startswith("BENCH_PGC_"))
    head = [f"# PostgreSQL's load from a cluster ({stamp})", "",
            f"`{settings} bench/pg_cost.py {' '.join(binaries)}`: for each binary in turn, three "
            "brokers on one PostgreSQL 15 (pg_stat_statements, fsync off) and one s3s-fs, all on "
            "this machine; WEIR_WAL_CAPACITY=256 MiB, everything else default.", ""]
    with open(out, "w") as f:
        f.write("\n".join(head + summary + [""] + sections))
    print(f"report: {out}")


if __name__ == "__main__":
    main()

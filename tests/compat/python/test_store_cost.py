"""What an idle cluster costs its PostgreSQL (cluster mode only): counted by pg_stat_statements
on the cluster's own PostgreSQL over an idle window, after a topic of a few hundred partitions
is made. Nothing is read again that has not changed: the controller and every broker's view read
the assignments when a change is announced (and a safety read every few seconds), and retention
reads no empty stream's ranges. Figures for 10,000 partitions: `make bench-pg-cost`.
"""

import os
import time

import pytest

from compat_util import create_topic

pytestmark = pytest.mark.skipif(
    os.environ.get("WEIR_COMPAT_TARGET", "").strip().lower() != "cluster",
    reason="needs a cluster's PostgreSQL (WEIR_COMPAT_TARGET=cluster)")

PARTITIONS = 300
IDLE_S = 12.0  # longer than a maintenance round (10 s)


def test_an_idle_cluster_reads_nothing_again_that_has_not_changed(broker_factory):
    c = broker_factory.cluster("store-cost", start=False)
    c.pg.options = "-c shared_preload_libraries=pg_stat_statements"
    c.launch()
    c.pg.sql("CREATE EXTENSION pg_stat_statements")
    create_topic(c.bootstrap, "idle", PARTITIONS)
    time.sleep(8)  # the partitions open (each reads its ranges once), first reports are made
    c.pg.sql("SELECT pg_stat_statements_reset()")
    time.sleep(IDLE_S)
    rows = c.pg.sql("SELECT calls, regexp_replace(query, '\\s+', ' ', 'g') "
                    "FROM pg_stat_statements s JOIN pg_roles r ON r.oid = s.userid "
                    "WHERE r.rolname = 'weir' AND query NOT LIKE '%pg_stat%'")
    calls = [(int(n), q) for n, q in rows]
    listing = "\n".join(f"{n:6} {q[:120]}" for n, q in sorted(calls, reverse=True))

    def count(fragment):
        return sum(n for n, q in calls if fragment in q)

    assignments = count("LEFT JOIN assignments a ON")
    ranges = count("FROM ranges r")
    total = sum(n for n, _ in calls)
    print(f"over {IDLE_S} s idle: {total} statements, {assignments} reads of the assignments, "
          f"{ranges} of ranges\n{listing}")
    # Polled, three brokers' views read them every second and the controller four times a
    # second: 84 in 12 s. Now: the controller's safety read every 5 s, each view's every 10 s.
    assert assignments <= 12, listing
    # Retention read every stream's ranges every 10 s, empty or not.
    assert ranges == 0, listing
    assert total / IDLE_S < 50, listing

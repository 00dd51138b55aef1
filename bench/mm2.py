"""MirrorMaker 2 in dedicated mode, mirroring a Kafka source into a Weir broker: the baseline
the cluster-link benchmarks compare with (`bench/link.py`, `bench/migration.py`).

Configured as the Kafka docs suggest for a migration: topic names kept
(IdentityReplicationPolicy), checkpoints and group offset syncs every second for the groups
named, the producer to Weir batching as the benchmarks' own producers do.
"""

import os
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))
KAFKA_SH = os.path.join(HERE, "..", "tools", "kafka", "kafka.sh")


class MirrorMaker:
    def __init__(self, root, source, target, topics, groups="", tasks=2):
        os.makedirs(root, exist_ok=True)
        self.props = os.path.join(root, "mm2.properties")
        self.log = os.path.join(root, "mm2.log")
        lines = [
            "clusters=source,weir",
            f"source.bootstrap.servers={source}",
            f"weir.bootstrap.servers={target}",
            "source->weir.enabled=true",
            "weir->source.enabled=false",
            f"source->weir.topics={topics}",
            f"source->weir.groups={groups or 'none'}",
            "replication.policy.class=org.apache.kafka.connect.mirror.IdentityReplicationPolicy",
            f"tasks.max={tasks}",
            "refresh.topics.interval.seconds=1",
            "refresh.groups.interval.seconds=1",
            "emit.checkpoints.interval.seconds=1",
            "sync.group.offsets.enabled=true",
            "sync.group.offsets.interval.seconds=1",
            "sync.topic.acls.enabled=false",
            "emit.heartbeats.enabled=false",
            "weir.producer.linger.ms=5",
            "weir.producer.batch.size=262144",
            "weir.producer.compression.type=lz4",
            "weir.producer.acks=all",
        ]
        for t in ("replication.factor", "checkpoints.topic.replication.factor",
                  "heartbeats.topic.replication.factor", "offset-syncs.topic.replication.factor",
                  "offset.storage.replication.factor", "status.storage.replication.factor",
                  "config.storage.replication.factor"):
            lines.append(f"{t}=1")
        with open(self.props, "w") as f:
            f.write("\n".join(lines) + "\n")
        self.proc = None
        self.started = None

    def start(self):
        self.started = time.monotonic()
        self.proc = subprocess.Popen(["bash", KAFKA_SH, "mirror-maker", self.props,
                                      "--clusters", "weir"],
                                     stdout=open(self.log, "w"), stderr=subprocess.STDOUT)
        return self

    @property
    def pid(self):
        # kafka.sh execs the JVM: the process started is MirrorMaker itself.
        return self.proc.pid

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)

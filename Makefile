# Weir: the two commands that always work on a fresh machine are `make run` and `make test`.
CARGO ?= cargo
WEIR_DEBUG_BIN := $(abspath $(or $(CARGO_TARGET_DIR),target)/debug/weir)
WEIR_RELEASE_BIN := $(abspath $(or $(CARGO_TARGET_DIR),target)/release/weir)
PYTHON ?= python3

.PHONY: run cluster test test-rust test-compat test-deploy test-upgrade build lint bench-storage fmt

run:
	$(CARGO) run --release -p weir -- serve

# Three brokers on one PostgreSQL and one s3s-fs, on this machine; prints the bootstrap servers.
cluster: build
	WEIR_BIN=$(WEIR_RELEASE_BIN) $(PYTHON) tests/harness/weir_harness cluster --base-port 19092 --admin-base-port 19644

build:
	$(CARGO) build --release -p weir

# Every test: the Rust unit and integration tests (the storage crash test included), then the
# client compatibility suites, each against a freshly started `weir serve`, and the chaos suite's
# short form (tests/chaos; WEIR_CHAOS=0 leaves it out).
test: test-rust test-compat test-deploy

# One run for the harnesses' port rule (tests/harness/weir_harness `ports`): no port is handed out
# twice across the suites of one `make test`, whatever their language.
export WEIR_HARNESS_PORTS_FILE ?= $(abspath $(or $(CARGO_TARGET_DIR),target))/harness-ports

test-rust:
	$(CARGO) test --workspace -- --test-threads=2

test-compat:
	$(CARGO) build -p weir
	WEIR_BIN=$(WEIR_DEBUG_BIN) tests/compat/run-all.sh

# The deployment kit (tests/deploy): the alert rules' unit tests (promtool), then the Grafana
# dashboard and the alert rules against a three-broker cluster under load scraped by a real
# Prometheus; the container image run with podman beside PostgreSQL and s3s-fs (built here from
# the debug binary: the packaging is what is tested; `make image` builds the release one); the
# Helm chart's scenarios linted, rendered and validated offline. About three minutes.
test-deploy: dashboards-check image-check helm-check

# Upgrades (about two minutes, plus builds of the two earlier versions the first time, about six
# minutes each: tools/build-release.sh). The rolling upgrade (tests/chaos/chaos.py --mode
# upgrade): a three-broker cluster started on UPGRADE_FROM's binary, upgraded to this tree's one
# broker at a time under idempotent and transactional load; every acknowledged record read back
# once and in order, every committed transaction whole, group offsets kept. Then a single
# broker's data directory written by UPGRADE_EARLY (a WAL of format 1), stopped cleanly or
# killed, taken over by this tree's broker (tests/upgrade/data_dir.py). CI runs it after
# `make test`.
UPGRADE_FROM ?= v0.1.0
UPGRADE_EARLY ?= 08a96a9
.PHONY: test-upgrade
test-upgrade:
	$(CARGO) build -p weir
	$(PYTHON) -m pip install -q --disable-pip-version-check --root-user-action=ignore -r tests/compat/python/requirements.txt
	old=$$(tools/build-release.sh $(UPGRADE_FROM)) && \
		WEIR_BIN=$(WEIR_DEBUG_BIN) $(PYTHON) tests/chaos/chaos.py --mode upgrade --upgrade-from "$$old"
	early=$$(tools/build-release.sh $(UPGRADE_EARLY)) && \
		WEIR_BIN=$(WEIR_DEBUG_BIN) $(PYTHON) tests/upgrade/data_dir.py "$$early"

# The container image (deploy/container), from the release binary, as localhost/weir:VERSION.
.PHONY: image image-check helm-check
image: build
	deploy/container/build.sh $(WEIR_RELEASE_BIN)

image-check:
	$(CARGO) build -p weir
	IMAGE=localhost/weir:test deploy/container/build.sh $(WEIR_DEBUG_BIN)
	$(PYTHON) tests/deploy/image_check.py localhost/weir:test

helm-check:
	$(PYTHON) tests/deploy/helm_check.py

.PHONY: dashboards-check
dashboards-check:
	$(CARGO) build -p weir
	WEIR_BIN=$(WEIR_DEBUG_BIN) $(PYTHON) tests/deploy/monitoring.py

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all

# Storage engine append throughput and latency beside raw pwrite+fdatasync.
bench-storage:
	$(CARGO) bench -p weir-storage --bench append

# Weir against Apache Kafka 4.1 on this machine with `weir perf` (about 20 minutes):
# prints a table and writes bench/results/YYYY-MM-DD-HHMM.md. Durations: see bench/run.sh.
.PHONY: bench
bench:
	bench/run.sh

# Many partitions (about 10 minutes): Weir beside Kafka with one topic of 16, 1,000 and 10,000
# partitions at 20 MiB/s; writes bench/results/partitions-YYYY-MM-DD-HHMM.md (bench/README.md).
.PHONY: bench-partitions
bench-partitions:
	$(CARGO) build --release -p weir
	tools/kafka/kafka.sh install
	WEIR_BIN=$(WEIR_RELEASE_BIN) $(PYTHON) bench/partitions.py

# Broker CPU per GiB beside Kafka (1 KiB records, acks=all, one group) at 16 partitions and 20
# MiB/s, and at 1,000 partitions and 5 MiB/s (Kafka falls seconds behind at 20 there, on two
# cores), each broker recorded with `perf`: flame graphs of the measured period and tables of
# where the time went, beside the results (about 8 minutes; needs perf).
.PHONY: bench-cpu
bench-cpu:
	$(CARGO) build --release -p weir
	tools/kafka/kafka.sh install
	BENCH_P_FLAME=1 BENCH_P_COUNTS=16 BENCH_P_MIB=20 WEIR_BIN=$(WEIR_RELEASE_BIN) $(PYTHON) bench/partitions.py
	BENCH_P_FLAME=1 BENCH_P_COUNTS=1000 BENCH_P_MIB=5 WEIR_BIN=$(WEIR_RELEASE_BIN) $(PYTHON) bench/partitions.py

# A Java consumer of 10,000 partitions with fetch sessions (KIP-227) on and off, and Kafka (about
# 5 minutes): end-to-end latency, broker and consumer CPU; writes
# bench/results/fetch-sessions-*.md. Settings: BENCH_FS_* (bench/fetch_sessions.py).
.PHONY: bench-fetch-sessions
bench-fetch-sessions:
	$(CARGO) build --release -p weir
	tools/kafka/kafka.sh install
	WEIR_BIN=$(WEIR_RELEASE_BIN) $(PYTHON) bench/fetch_sessions.py

# Kafka's ProducerPerformance against both (about 3 minutes): the maximum durable throughput and
# latency at 30,000 records/s, one partition; writes bench/results/producer-perf-*.md.
.PHONY: bench-producer-perf
bench-producer-perf:
	$(CARGO) build --release -p weir
	tools/kafka/kafka.sh install
	WEIR_BIN=$(WEIR_RELEASE_BIN) $(PYTHON) bench/producer_perf.py

# What TLS costs (about 7 minutes): Kafka's ProducerPerformance as in bench-producer-perf over a
# PLAINTEXT and a SASL_SSL (SCRAM-SHA-512) listener of a fresh Kafka and a fresh Weir: maximum
# throughput, p50/p99 at 30,000 records/s, broker CPU per GiB, SASL_SSL/PLAINTEXT and Weir/Kafka;
# writes bench/results/tls-YYYY-MM-DD-HHMM.md. Settings: BENCH_TLS_* (bench/tls.py).
.PHONY: bench-tls
bench-tls:
	$(CARGO) build --release -p weir
	tools/kafka/kafka.sh install
	$(PYTHON) -m pip install -q --disable-pip-version-check --root-user-action=ignore -r tests/compat/python/requirements.txt
	WEIR_BIN=$(WEIR_RELEASE_BIN) $(PYTHON) bench/tls.py

# What schema validation costs on the produce path (about 5 minutes): ProducerPerformance with
# 1 KiB JSON records framed with a schema id, on a topic without validation, with
# confluent.value.schema.validation=true, and with weir.schema.validation=full; throughput,
# latency at a fixed rate and broker CPU per GiB; writes
# bench/results/schema-validation-YYYY-MM-DD-HHMM.md. Settings: BENCH_SV_* (bench/schema_validation.py).
.PHONY: bench-schema-validation
bench-schema-validation:
	$(CARGO) build --release -p weir
	tools/kafka/kafka.sh install
	$(PYTHON) -m pip install -q --disable-pip-version-check --root-user-action=ignore -r tests/compat/python/requirements.txt
	WEIR_BIN=$(WEIR_RELEASE_BIN) $(PYTHON) bench/schema_validation.py

# Topics as Iceberg tables (about 10 minutes, plus pyspark and the Iceberg Spark runtime the first
# time): producers' latency, the table's lag and the broker's CPU per GiB at 50 MiB/s of 1 KiB
# Avro records with and without a typed table; a 5 GiB backlog translated, beside pyarrow writing
# the same rows as Parquet; Spark's JDBC catalog reading the table. Writes
# bench/results/iceberg-YYYY-MM-DD-HHMM.md. Settings: BENCH_ICE_* (bench/iceberg.py).
.PHONY: bench-iceberg
bench-iceberg:
	$(CARGO) build --release -p weir
	$(PYTHON) -m pip install -q --disable-pip-version-check --root-user-action=ignore -r tests/compat/python/requirements.txt
	WEIR_BIN=$(WEIR_RELEASE_BIN) $(PYTHON) bench/iceberg.py

# Partition moves under load on a three-broker cluster (one PostgreSQL, one s3s-fs, three
# `weir serve`; under 2 minutes): produce and consumer unavailability per move for each backlog
# size, beside AutoMQ's published figure; writes bench/results/move-YYYY-MM-DD-HHMM.md.
# Settings: BENCH_MOVE_SIZES (default 0,100MiB,1GiB), BENCH_MOVE_MOVES, BENCH_MOVE_RATE, ...
# (bench/README.md, bench/move.py).
.PHONY: bench-move
bench-move:
	$(CARGO) build --release -p weir
	$(PYTHON) -m pip install -q --disable-pip-version-check --root-user-action=ignore -r tests/compat/python/requirements.txt
	WEIR_BIN=$(WEIR_RELEASE_BIN) $(PYTHON) bench/move.py

# The object WAL beside the file WAL and Kafka (about 6 minutes): one idempotent producer at a
# fixed rate on a single broker of each kind (Weir on s3s-fs: file WAL, object WAL, object WAL
# with 100 ms PUTs), produce and end-to-end latency, PUTs and bytes written per GiB produced;
# then one default producer's maximum on the object WAL with 100 ms PUTs. Writes
# bench/results/object-wal-YYYY-MM-DD-HHMM.md. Settings: BENCH_OW_* (bench/object_wal.py).
# Transactional produce beside Kafka (about 2 minutes): Kafka's ProducerPerformance with a
# transactional id committing every 100 ms (Transactions V2 on both). Writes
# bench/results/transactions-YYYY-MM-DD-HHMM.md. Settings: BENCH_TX_* (bench/transactions.py).
.PHONY: bench-transactions
bench-transactions:
	$(CARGO) build --release -p weir
	tools/kafka/kafka.sh install
	$(PYTHON) -m pip install -q --disable-pip-version-check --root-user-action=ignore -r tests/compat/python/requirements.txt
	WEIR_BIN=$(WEIR_RELEASE_BIN) $(PYTHON) bench/transactions.py

# A cluster link mirroring Apache Kafka 4.1 (bench/link.py): end-to-end latency through the link
# beside a consumer of the source at a fixed rate, a backlog's catch-up beside Kafka's
# ConsumerPerformance, CPU per GiB mirrored. A few minutes.
.PHONY: bench-link
bench-link:
	$(CARGO) build --release -p weir
	tools/kafka/kafka.sh install
	$(PYTHON) -m pip install -q --disable-pip-version-check --root-user-action=ignore -r tests/compat/python/requirements.txt
	WEIR_BIN=$(WEIR_RELEASE_BIN) $(PYTHON) bench/link.py
	WEIR_BIN=$(WEIR_RELEASE_BIN) $(PYTHON) bench/migration.py

# Share groups beside Kafka 4.4: 1, 8 and 32 share consumers on 4 partitions, records/s,
# acknowledgement (commitSync) latency and broker CPU per GiB (bench/share.py; a few minutes).
.PHONY: bench-share
bench-share:
	$(CARGO) build --release -p weir
	tools/kafka/kafka.sh install
	WEIR_BIN=$(WEIR_RELEASE_BIN) $(PYTHON) bench/share.py

.PHONY: bench-object-wal
bench-object-wal:
	$(CARGO) build --release -p weir
	tools/kafka/kafka.sh install
	$(PYTHON) -m pip install -q --disable-pip-version-check --root-user-action=ignore -r tests/compat/python/requirements.txt
	WEIR_BIN=$(WEIR_RELEASE_BIN) $(PYTHON) bench/object_wal.py

# PostgreSQL under a three-broker cluster (about 2 minutes): metadata commits per second and
# their latency under `weir perf` at full speed, then PostgreSQL stopped for 10 s and started
# again under produce and consume load: stalls, client errors, every acked record read back.
# Writes bench/results/pg-YYYY-MM-DD-HHMM.md. Settings: BENCH_PG_* (bench/pg_restart.py).
# Zones (about 6 minutes): produce and end-to-end latency for clients in and out of the leader's
# zone, per routing choice and WAL kind, with cross-zone bytes from the meters, beside Kafka
# (three brokers in three racks, follower fetching). Writes bench/results/zones-*.md.
.PHONY: bench-zones
bench-zones:
	$(CARGO) build --release -p weir
	tools/kafka/kafka.sh install
	$(PYTHON) -m pip install -q --disable-pip-version-check --root-user-action=ignore -r tests/compat/python/requirements.txt
	WEIR_BIN=$(WEIR_RELEASE_BIN) $(PYTHON) bench/zones.py

# Elasticity (about 2 minutes): one broker under steady load on 100 partitions, then two more
# join; the time until every broker's bytes in and out are within 10 % of the mean, the moves,
# produce p99 before, during and after, beside AutoMQ's published 90 s of balancing. Writes
# bench/results/elastic-YYYY-MM-DD-HHMM.md. Settings: BENCH_EL_* (bench/elastic.py).
.PHONY: bench-elastic
bench-elastic:
	$(CARGO) build --release -p weir
	$(PYTHON) -m pip install -q --disable-pip-version-check --root-user-action=ignore -r tests/compat/python/requirements.txt
	WEIR_BIN=$(WEIR_RELEASE_BIN) $(PYTHON) bench/elastic.py

.PHONY: bench-pg
bench-pg:
	$(CARGO) build --release -p weir
	$(PYTHON) -m pip install -q --disable-pip-version-check --root-user-action=ignore -r tests/compat/python/requirements.txt
	WEIR_BIN=$(WEIR_RELEASE_BIN) $(PYTHON) bench/pg_restart.py

# What a cluster costs its PostgreSQL (about 3 minutes): three brokers, one topic of 10,000 idle
# partitions, then 1 GiB produced and consumed at 20 MiB/s; statements and transactions per second
# idle and per GiB under load, by kind (pg_stat_statements), with the brokers' CPU; writes
# bench/results/pg-cost-*.md. Settings: BENCH_PGC_* (bench/pg_cost.py).
.PHONY: bench-pg-cost
bench-pg-cost:
	$(CARGO) build --release -p weir
	$(PYTHON) -m pip install -q --disable-pip-version-check --root-user-action=ignore -r tests/compat/python/requirements.txt
	WEIR_BIN=$(WEIR_RELEASE_BIN) $(PYTHON) bench/pg_cost.py

# Object requests per GiB on the file WAL (about 8 minutes per build): uploads and compaction at
# 50 MiB/s, a catch-up's GETs, and the storage left by mixed retention. BENCH_UP_BASE_BIN=OLD/weir
# runs an older build first, in the same run. Settings: BENCH_UP_* (bench/upload_puts.py).
.PHONY: bench-upload-puts
bench-upload-puts:
	$(CARGO) build --release -p weir
	$(PYTHON) -m pip install -q --disable-pip-version-check --root-user-action=ignore -r tests/compat/python/requirements.txt
	WEIR_BIN=$(WEIR_RELEASE_BIN) $(PYTHON) bench/upload_puts.py

# OpenMessaging Benchmark workload files (bench/workloads/*.yaml, OMB's format) against Kafka and
# Weir, scaled to this machine (about 12 minutes): `weir perf --workload` prints OMB's figures;
# writes bench/results/omb-*.md. Settings: BENCH_OMB_* (bench/omb.py). Also a section of `make bench`.
.PHONY: bench-omb
bench-omb:
	$(CARGO) build --release -p weir
	tools/kafka/kafka.sh install
	WEIR_BIN=$(WEIR_RELEASE_BIN) $(PYTHON) bench/omb.py

# Paced catch-up (about 6 minutes): producers' p99 while a consumer group reads a backlog from
# objects, the broker's catch-up rate unlimited and at 3x the produce rate
# (storage.catchup_bytes_per_sec); writes bench/results/catchup-pacing-*.md. Settings:
# BENCH_CP_* (bench/catchup_pacing.py).
.PHONY: bench-catchup-pacing
bench-catchup-pacing:
	$(CARGO) build --release -p weir
	WEIR_BIN=$(WEIR_RELEASE_BIN) $(PYTHON) bench/catchup_pacing.py

# The chaos suite's long form (tests/chaos/chaos.py --mode long; about 20 minutes, then 5 of stress): 102 faults in
# turn (kill -9 of a leader, SIGSTOP past the session timeout, PostgreSQL restarts, object-store
# and WAL errors, an unreachable WAL) on a three-broker cluster under idempotent and transactional
# load, then every acknowledged record read back: per fault kind, lost / duplicated / reordered,
# the longest produce unavailability, and transactions committed / aborted / unknown with the
# read_committed checks (committed lost, aborted visible, not atomic). Exits non-zero on any
# loss. Writes bench/results/chaos-YYYY-MM-DD-HHMM.md.
# Settings: CHAOS_SEED, CHAOS_FAULTS, CHAOS_KINDS, ... (tests/chaos/chaos.py); CHAOS_WAL_KIND=object
# runs it on brokers without a WAL file (the WAL faults left out; report chaos-object-wal-*.md).
.PHONY: chaos
chaos:
	$(CARGO) build --release -p weir
	$(PYTHON) -m pip install -q --disable-pip-version-check --root-user-action=ignore -r tests/compat/python/requirements.txt
	WEIR_BIN=$(WEIR_RELEASE_BIN) $(PYTHON) tests/chaos/chaos.py --mode long
	# Coordinators under concurrency for 5 minutes (12 s in `make test`) on a three-broker cluster:
	# transactional pipelines of every group protocol with members replaced every second, beside
	# probes of producer ids, groups, offsets and topic creation (tests/compat/go/stress_test.go).
	cd tests/compat/go && WEIR_BIN=$(WEIR_RELEASE_BIN) WEIR_COMPAT_TARGET=cluster \
		WEIR_STRESS_SECONDS=$${WEIR_STRESS_SECONDS:-300} \
		go test -count=1 -timeout 30m -run 'TestTxnPipelinesUnderRebalances$$' -v .

# The soak (2 hours; WEIR_SOAK_SECONDS to change it): a three-broker cluster under idempotent,
# transactional and consumer-group load (both group protocols), a partition move and a SIGTERM
# restart of one broker every 3 minutes; fails on any lost, duplicated or reordered record, any
# stuck request, or resident memory, open files, threads or tasks of the brokers that run
# throughout growing without bound. Writes bench/results/soak-YYYY-MM-DD-HHMM.md.
.PHONY: soak
soak:
	$(CARGO) build --release -p weir
	$(PYTHON) -m pip install -q --disable-pip-version-check --root-user-action=ignore -r tests/compat/python/requirements.txt
	CHAOS_SOAK_SECONDS=$${WEIR_SOAK_SECONDS:-7200} WEIR_BIN=$(WEIR_RELEASE_BIN) $(PYTHON) tests/chaos/chaos.py --mode soak

# Failover after kill -9 (about 3 minutes): 10 kills of a leader under load on a three-broker
# cluster; per kill the time until every partition it led is acknowledged again by a new leader,
# min/median/max beside AutoMQ's; writes bench/results/failover-YYYY-MM-DD-HHMM.md.
# Settings: CHAOS_FAULTS (kills), CHAOS_RATE, ... (bench/README.md, tests/chaos/chaos.py).
.PHONY: bench-failover
bench-failover:
	$(CARGO) build --release -p weir
	$(PYTHON) -m pip install -q --disable-pip-version-check --root-user-action=ignore -r tests/compat/python/requirements.txt
	WEIR_BIN=$(WEIR_RELEASE_BIN) $(PYTHON) tests/chaos/chaos.py --mode bench

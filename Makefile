# Weir: the two commands that always work on a fresh machine are `make run` and `make test`.
CARGO ?= cargo

.PHONY: run test build lint bench-storage fmt

run:
	$(CARGO) run --release -p weir -- serve

build:
	$(CARGO) build --release -p weir

# Every test: unit and integration tests of every crate (the crash test included).
test:
	$(CARGO) test --workspace --all-targets -- --test-threads=2

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all

# Storage engine append throughput and latency beside raw pwrite+fdatasync.
bench-storage:
	$(CARGO) bench -p weir-storage --bench append

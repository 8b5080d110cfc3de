# Sluice: the targets people and CI run. `make test` and `make demo` do their own set-up
# on a fresh Debian machine (MariaDB from apt, Rust crates from crates.io).

CARGO ?= cargo
SLUICE_WORK ?= $(CURDIR)/.work
export SLUICE_WORK

.PHONY: all build build-deps test test-fast lint fmt demo bench bench-records bench-instructions bench-data fuzz-smoke setup soak clean

all: build

## OpenSSL's headers and pkg-config (apt, when missing): librdkafka's TLS and SASL SCRAM link them.
build-deps:
	integration/lib/build_deps.sh install

build: build-deps
	$(CARGO) build --release --bin sluice

TARGET_DIR ?= $(if $(CARGO_TARGET_DIR),$(CARGO_TARGET_DIR),$(CURDIR)/target)
# The tests start the test registry from this binary (a debug build shares the test build's
# dependencies; building it from inside a running test would wait on cargo's lock).
export SLUICE_REGISTRY_BIN ?= $(TARGET_DIR)/debug/sluice-test-registry

## Installs what the tests need: OpenSSL's headers, MariaDB and Prometheus (apt), the Kafka-compatible broker
## noida-db (cargo install into $(SLUICE_WORK)/tools), the Elasticsearch-API engines and the S3-compatible
## moto server (pip, into venvs there), and the test Schema Registry binary.
setup: build-deps
	integration/lib/mariadb.sh install
	integration/lib/prometheus.sh install
	integration/lib/broker.sh install
	integration/lib/elastic.sh install
	integration/lib/s3.sh install
	$(CARGO) build -p sluice-test-registry

## Every test: unit, fixtures, oracles, mutation, the scenarios against real MariaDB, the
## Helm chart's checks (lint, schemas, alert rule tests), and the image run as the chart runs it
## (non-root, read-only root filesystem; buildah and podman from apt).
# The scenario tests mostly wait on their servers: three at once on two cores was the fastest
# setting measured without a failure (bench/README.md, "The test suite's wall time").
RUST_TEST_THREADS ?= 3
export RUST_TEST_THREADS

test: setup
	$(CARGO) test --workspace --all-targets
	integration/helm_check.sh
	integration/container_check.sh

## Unit tests only (no servers).
test-fast: build-deps
	$(CARGO) test --workspace --lib

lint: build-deps
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all

## Starts a local MariaDB, broker and Schema Registry, writes sample changes, runs `sluice run`, and shows
## the change events read back from Kafka (then the flashback SQL decoded offline).
demo: setup build
	integration/demo.sh

## The 1.4 M-row-change benchmark binlog (generated once, about 2 minutes). The server names the
## files (mysql-bin.000002, ...), so any file in full/ counts.
bench-data:
	@ls $(SLUICE_WORK)/bench/full/mysql-bin.* >/dev/null 2>&1 || bench/gen_bench_binlog.sh $(SLUICE_WORK)/bench

## Decoder throughput, side by side with mysql_common on the same file: each decoder in its own
## child process, interleaved, median of BENCH_RUNS runs (see bench/README.md).
BENCH_RUNS ?= 3
BENCH_VARIANT ?= full
bench: bench-data
	$(CARGO) run --release -p sluice-binlog --example bench_decode -- --runs $(BENCH_RUNS) \
		$(SLUICE_WORK)/bench/$(BENCH_VARIANT)/mysql-bin.*

## Sluice's own cost per row change without servers: the file's rows decoded, and decoded,
## encoded as Avro and framed as `sluice run` does (its Out::change), into a counting sink.
bench-records: bench-data
	$(CARGO) run --release -p sluice --example record_path -- --runs $(BENCH_RUNS) \
		$$(ls $(SLUICE_WORK)/bench/$(BENCH_VARIANT)/mysql-bin.* | head -n 1)

## The same path's instructions per row change, counted by valgrind's callgrind (apt install
## valgrind): the same from run to run, so a change of a few percent shows where seconds on a
## shared VM cannot (bench/instructions.sh; CG_TOP=15 lists the costliest functions).
bench-instructions: bench-data
	bench/instructions.sh

## The long form of the fault suite (by hand, about 15 minutes): a 10-minute write workload at the
## highest rate MariaDB takes here, RSS and lag sampled every second and plotted, every row change
## counted, then each fuzz target for a minute (bench/soak.sh; results in bench/soak/).
soak: setup
	bench/soak.sh

clean:
	$(CARGO) clean
	rm -rf $(SLUICE_WORK)

# redis-lock: build, run and test the lock module. `make help` lists the targets.

CARGO ?= cargo
PORT ?= 7379
RUNS ?= 20
MODULE := target/release/libredis_lock.so
# What the module is built from: `make run` rebuilds it only when one of these is newer,
# so a module the test build made (same code, the tests' dependency features) is served
# as it is instead of being rebuilt under the running tests.
MODULE_SOURCES := Cargo.toml Cargo.lock $(shell find src -name '*.rs')

.PHONY: help deps deps-test servers build run test test-loaded flaky test-cluster chaos fuzz lint fmt clean dist faults peers-latest

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

deps: ## install missing system packages (redis-server, libclang for the binding)
	@scripts/install-deps.sh

deps-test: ## also what the tests need (php-cli, php-redis, node, the pinned Python test virtualenvs of scripts/pins.txt under target/)
	@scripts/install-deps.sh --test

servers: ## fetch the other servers the suite runs on (Redis 8.2, Valkey 8.1 and 9.1) into target/servers
	@scripts/fetch-servers.sh

build: deps ## build the module in release mode (target/release/libredis_lock.so)
	$(CARGO) build --release

$(MODULE): $(MODULE_SOURCES) | deps
	$(CARGO) build --release
	@touch $@

run: $(MODULE) ## build (when the sources changed), then start redis-server with the module (port 7379, or PORT=...; REDIS_SERVER=path for another server)
	@mkdir -p target/run
	$${REDIS_SERVER:-redis-server} redis.conf --port $(PORT)

DIST ?= dist
dist: $(MODULE) ## the release tarball, for a server without a Rust toolchain: $(DIST)/redis-lock-<version>-<arch>-linux-gnu.tar.gz (stripped module, its debug symbols, the redis-lock command line, a loadmodule line, README, LICENSE, SHA256SUMS)
	$(CARGO) build --release -p redis-lock-cli
	@scripts/dist.sh $(DIST)

test: deps ## build once, run every test on every server CI tests (REDIS_SERVER=path: on that one only); installs what the tests need (as deps-test; the virtualenvs beside the build)
	@scripts/install-deps.sh --test --no-env
	@scripts/test-servers.sh

test-loaded: deps ## the whole suite as `make test` runs it, with a CPU hog on every core beside it (stress-ng), started and stopped here
	@scripts/install-deps.sh --test --no-env
	@scripts/test-loaded.sh

flaky: deps ## the flake hunter: RUNS (default 20) rounds of the test binaries BIN (e.g. "packages server"; default all) on SERVERS (e.g. "redis-7.0 valkey-8.1.8"; default all), tests matching FILTER; prints per test how often it failed
	@RUNS=$(RUNS) BIN="$(BIN)" FILTER="$(FILTER)" SERVERS="$(SERVERS)" scripts/flaky.sh

chaos: deps ## the chaos test for longer (CHAOS_SECONDS, default 120), on REDIS_SERVER or redis-server
	CHAOS_SECONDS=$${CHAOS_SECONDS:-120} $(CARGO) test --release --test server chaos:: -- --nocapture

fuzz: deps ## property tests (PROPTEST_CASES, default 100000), mutated RESTORE payloads (RESTORE_FUZZ_CASES, default 100000), model-checked command sequences (MODEL_FUZZ_STEPS, default 50000) and random LOCK.DO commands (LOCK_DO_FUZZ_CASES, default 100000), long
	PROPTEST_CASES=$${PROPTEST_CASES:-100000} $(CARGO) test --release -p redis-lock --lib -- properties
	PROPTEST_CASES=$${PROPTEST_CASES:-100000} $(CARGO) test --release -p lock-core -- properties bindings
	RESTORE_FUZZ_CASES=$${RESTORE_FUZZ_CASES:-100000} $(CARGO) test --release --test fuzz restore_fuzz:: -- --nocapture
	MODEL_FUZZ_STEPS=$${MODEL_FUZZ_STEPS:-50000} $(CARGO) test --release --test fuzz model_fuzz:: -- --nocapture
	LOCK_DO_FUZZ_CASES=$${LOCK_DO_FUZZ_CASES:-100000} $(CARGO) test --release --test fuzz lock_do_fuzz:: -- --nocapture

faults: $(MODULE) ## the fault harness's full run (partitions, pauses, crashes, clock jumps; module vs recipe) on Redis 7.0.15 and Valkey 9.1.2, as root (minutes; target/faults/*.md, docs/faults.md)
	@scripts/faults.sh

peers-latest: ## the peers' suites (redis-py's lock tests, node-redlock's, the conformance scenarios) on the registries' newest releases beside the pinned ones: a table (not part of `make test`)
	@scripts/peers-latest.sh

test-cluster: deps ## run only the Redis Cluster and failover tests (real 6-node clusters)
	$(CARGO) test --release --test cluster

.PHONY: bench bench-smoke soak
# valgrind (instructions per call) and gnuplot (the contention chart) are installed here
# when missing; if that fails, the benchmark runs without those two parts.
# `make bench BENCH_ARGS="--only contention"` runs some scenarios (`--help` lists them).
bench: $(MODULE) ## benchmark module vs SET NX + Lua recipe (minutes; target/bench/results.md)
	@if ! command -v valgrind >/dev/null || ! command -v gnuplot >/dev/null; then \
	  echo "installing valgrind and gnuplot-nox for the benchmark"; \
	  SUDO=$$([ "$$(id -u)" -eq 0 ] || echo sudo); \
	  ($$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq \
	    --no-install-recommends valgrind gnuplot-nox) \
	    || echo "could not install them: no instruction counts, no chart"; \
	fi
	$(CARGO) build --release -p redis-lock-floor
	$(CARGO) run --release -p redis-lock-bench -- $(BENCH_ARGS)

soak: $(MODULE) ## a million locks and ten thousand waiters on one server, side by side with plain keys (minutes; target/soak/report.md, soak.png)
	@command -v gnuplot >/dev/null || { echo "installing gnuplot-nox for the plot"; \
	  SUDO=$$([ "$$(id -u)" -eq 0 ] || echo sudo); \
	  ($$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq \
	    --no-install-recommends gnuplot-nox) || echo "could not install it: no plot"; }
	$(CARGO) run --release -p redis-lock-bench --bin soak -- $(SOAK_ARGS)

bench-smoke: $(MODULE) ## the benchmark in seconds with tiny sizes (as `make test` runs it)
	$(CARGO) run --release -p redis-lock-bench -- --smoke --out target/bench-smoke

lint: ## rustfmt check and clippy with warnings as errors
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --release --workspace --all-targets -- -D warnings

fmt: ## format the code
	$(CARGO) fmt --all

clean: ## remove build output and demo data
	$(CARGO) clean

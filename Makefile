# redis-lock: build, run and test the lock module. `make help` lists the targets.

CARGO ?= cargo
PORT ?= 7379
MODULE := target/release/libredis_lock.so

.PHONY: help deps build run test test-unit lint fmt clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

deps: ## install missing system packages (redis-server, libclang for the binding)
	@scripts/install-deps.sh

build: deps ## build the module in release mode (target/release/libredis_lock.so)
	$(CARGO) build --release

run: build ## build, then start redis-server with the module (port 7379, or PORT=...)
	@mkdir -p target/run
	redis-server redis.conf --port $(PORT)

test: build ## run every test: unit tests and real-server tests
	$(CARGO) test --release --workspace

lint: ## rustfmt check and clippy with warnings as errors
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --release --workspace --all-targets -- -D warnings

fmt: ## format the code
	$(CARGO) fmt --all

clean: ## remove build output and demo data
	$(CARGO) clean

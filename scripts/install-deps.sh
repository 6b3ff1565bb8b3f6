#!/usr/bin/env bash
# Installs what building and running the module needs on a Debian machine, skipping
# what is already there: redis-server and redis-cli (7.0+), libclang with its headers
# for the binding's bindgen step. With --test, also what the tests need beyond that:
# PHP with phpredis, python3 with the tests' virtualenvs (scripts/test-env.sh: redis-py,
# pytest, mypy, ... as scripts/pins.txt pins them), Node.js with npm (the client packages'
# tests), tmux (the interactive cli's hints are read off a real terminal), stress-ng (the
# load beside `make test-loaded`), iptables and libfaketime (the fault harness),
# prometheus-redis-exporter and promtool (lock health in Prometheus). Safe to run again.
set -euo pipefail

with_test_deps=0
with_env=1
if [ "${1:-}" = --test ]; then
  with_test_deps=1
  # --no-env: not the Python virtualenvs (scripts/test-servers.sh makes them beside the
  # build, so that make test waits for neither one after the other).
  [ "${2:-}" = --no-env ] && with_env=0
fi

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
command -v cc >/dev/null 2>&1 || missing+=(gcc libc6-dev)
command -v make >/dev/null 2>&1 || missing+=(make)
# `make dist` strips the module and keeps its debug symbols apart.
command -v objcopy >/dev/null 2>&1 || missing+=(binutils)
# bindgen loads libclang at build time and needs clang's own headers (stddef.h).
if ! ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1 \
  || ! ls /usr/lib/llvm-*/lib/clang/*/include/stddef.h >/dev/null 2>&1; then
  missing+=(libclang)
fi
# clients/rust/tests/packages/other_languages.rs runs PHP with phpredis and Python with redis-py.
if [ "$with_test_deps" = 1 ]; then
  command -v php >/dev/null 2>&1 || missing+=(php-cli)
  php -m 2>/dev/null | grep -x redis >/dev/null || missing+=(php-redis)
  command -v python3 >/dev/null 2>&1 || missing+=(python3)
  command -v node >/dev/null 2>&1 || missing+=(nodejs)
  command -v npm >/dev/null 2>&1 || missing+=(npm)
  # tests/server/command_docs.rs types into a real interactive cli in tmux.
  command -v tmux >/dev/null 2>&1 || missing+=(tmux)
  # `make test-loaded` runs the suite beside a CPU hog on every core.
  command -v stress-ng >/dev/null 2>&1 || missing+=(stress-ng)
  # The fault harness (faults/, tests/faults): partitions as iptables rules, clock jumps
  # with libfaketime, its store in SQLite (python3's own sqlite3 module).
  command -v iptables >/dev/null 2>&1 || missing+=(iptables)
  [ -e /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 ] || missing+=(libfaketime)
  # Lock health in Prometheus (tests/server/metrics.rs): Debian's redis_exporter with the
  # script monitoring/redis-lock.lua, and promtool (Debian's prometheus) for the alert
  # rules. (Where systemd runs, Debian starts both services on install.)
  command -v prometheus-redis-exporter >/dev/null 2>&1 || missing+=(prometheus-redis-exporter)
  command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi

install_test_packages() {
  # redis-py, pytest, mypy, ... at the versions of scripts/pins.txt, in virtualenvs under
  # target/ (never the machine's own site-packages).
  [ "$with_env" = 0 ] || "$(dirname "$0")/test-env.sh" >/dev/null
  # The Node package's test dependencies (ioredis, redis, typescript), as locked.
  local node_dir
  node_dir="$(dirname "$0")/../clients/node"
  if [ ! -d "$node_dir/node_modules/ioredis" ] || [ "$node_dir/package-lock.json" -nt "$node_dir/node_modules" ]; then
    echo "installing: the Node package's test dependencies (npm ci)"
    (cd "$node_dir" && npm ci --no-audit --no-fund --loglevel=error)
  fi
}

if [ "${#missing[@]}" -eq 0 ]; then
  [ "$with_test_deps" = 0 ] || install_test_packages
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "missing: ${missing[*]}; install them with your package manager" >&2
  exit 1
fi
echo "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
packages=()
for name in "${missing[@]}"; do
  if [ "$name" = libclang ]; then
    # The smallest set that works on Debian 12 (libclang 14); elsewhere, the default.
    if apt-cache show libclang1-14 >/dev/null 2>&1; then
      packages+=(libclang1-14 libclang-common-14-dev)
    else
      packages+=(libclang-dev)
    fi
  else
    packages+=("$name")
  fi
done
$SUDO apt-get install -y -qq --no-install-recommends "${packages[@]}"
[ "$with_test_deps" = 0 ] || install_test_packages

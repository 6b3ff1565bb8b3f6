#!/usr/bin/env bash
# `make faults`: the fault harness's full run (`python3 -m faults`; docs/faults.md), on Debian's
# Redis 7.0.15 and Valkey 9.1.2 (FAULT_SERVERS="name=path ..." for others): for each seed of
# FAULT_SEEDS (default "1 2 3"), every nemesis alone, then FAULT_MIXED (default 6) phases
# drawn at random with the seed, each of one nemesis or two at once, the module's workers
# on the packages' defaults (Python, Node, Rust and PHP workers) and the servers on the
# project's redis.conf setting (lock.replicas auto); then the partition and the crash again
# with both off (the comparison: it overlaps), with min-replicas-to-write 1, and
# with the recipe waiting WAIT 1 after every grant; then, on Redis 8.2.3 and Valkey 9.1.2,
# every seed again with the server's own wait (lock.replicas auto) for workers that send
# plain commands. FAULT_MODULE names the module to load (default the Makefile's build).
# Reports: target/faults/<name>-seed-<n>.md, <name>-replicas-0.md,
# <name>-min-replicas-1.md, <name>-wait-replicas-1.md and <name>-server-wait-seed-<n>.md.
# Installs what it needs (iptables, libfaketime, a C compiler for the clock shim), as
# root. Exits non-zero if a checker found a violation of what the module promises or a
# run failed; whatever happens, no process, packet filter rule or faked clock of a run
# outlives it.
set -uo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v iptables >/dev/null 2>&1 || missing+=(iptables)
ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1 || missing+=(libfaketime)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
command -v cc >/dev/null 2>&1 || missing+=(gcc libc6-dev)
if [ "${#missing[@]}" -gt 0 ]; then
  echo "installing: ${missing[*]}"
  SUDO=$([ "$(id -u)" -eq 0 ] || echo sudo)
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
    --no-install-recommends "${missing[@]}" || exit 1
fi

if [ -z "${FAULT_SERVERS:-}" ]; then
  listing=$(scripts/fetch-servers.sh) || exit 1
  FAULT_SERVERS="redis-7.0.15=$(awk '$1 == "redis-7.0" {print $2}' <<<"$listing") \
valkey-9.1.2=$(awk '$1 == "valkey-9.1.2" {print $2}' <<<"$listing")"
fi
# The workers' packages: the Python one runs on the pinned test environment (target/venv,
# scripts/pins.txt), the Node one on its locked modules, the PHP one on phpredis; the Rust
# package's worker is built here (the module's build is the Makefile's).
scripts/install-deps.sh --test --no-env || exit 1
python=$(scripts/test-env.sh --no-oldest | head -1) || exit 1
cargo build --release -q -p redis-lock-client --example fault_worker || exit 1
seeds=${FAULT_SEEDS:-1 2 3}
# The module every run loads (FAULT_MODULE: a copy, so that a build during the run does
# not change it under a restarted node).
module=${FAULT_MODULE:-$PWD/target/release/libredis_lock.so}
mixed=${FAULT_MIXED:-6}

# Whatever ends this script, clean up after every run it started (a run cleans up after
# itself; this covers one killed with SIGKILL).
trap '"$python" -m faults --sweep' EXIT

status=0
started=$SECONDS
for entry in $FAULT_SERVERS; do
  name=${entry%%=*} server=${entry#*=}
  for seed in $seeds; do
    echo "==== $name: every nemesis, then $mixed mixed phases (seed $seed), the packages' defaults"
    "$python" -m faults --server "$server" --module "$module" --nemeses all --mixed "$mixed" --seed "$seed" \
      --label "$name-seed-$seed" >/dev/null || status=1
    echo "     target/faults/$name-seed-$seed.md"
  done
  first=${seeds%% *}
  echo "==== $name: the partition and the crash with the package's replicas and the server's lock.replicas off (expected to overlap)"
  "$python" -m faults --server "$server" --module "$module" --nemeses partition-master,kill-master --seed "$first" \
    --replicas 0 --server-replicas 0 --label "$name-replicas-0" >/dev/null
  echo "     target/faults/$name-replicas-0.md (exit $?: 1 is the overlap it shows)"
  echo "==== $name: the partition and the crash with min-replicas-to-write 1"
  "$python" -m faults --server "$server" --module "$module" --nemeses partition-master,kill-master --seed "$first" \
    --min-replicas 1 --label "$name-min-replicas-1" >/dev/null || status=1
  echo "     target/faults/$name-min-replicas-1.md"
  echo "==== $name: the partition and the crash, the recipe with WAIT 1 after every grant"
  "$python" -m faults --server "$server" --module "$module" --nemeses partition-master,kill-master --seed "$first" \
    --wait-replicas 1 --label "$name-wait-replicas-1" >/dev/null || status=1
  echo "     target/faults/$name-wait-replicas-1.md"
done
# The server's own wait (REPLICAS, lock.replicas auto) for clients that send plain
# commands: the Python workers with the package's replicas off, alone, on the servers that
# can wait (FAULT_SERVER_WAIT_SERVERS="name=path ...", default Redis 8.2.3 and Valkey 9.1.2).
if [ -z "${FAULT_SERVER_WAIT_SERVERS:-}" ]; then
  listing=${listing:-$(scripts/fetch-servers.sh)} || exit 1
  FAULT_SERVER_WAIT_SERVERS="redis-8.2.3=$(awk '$1 == "redis-8.2.3" {print $2}' <<<"$listing") \
valkey-9.1.2=$(awk '$1 == "valkey-9.1.2" {print $2}' <<<"$listing")"
fi
for entry in $FAULT_SERVER_WAIT_SERVERS; do
  name=${entry%%=*} server=${entry#*=}
  for seed in $seeds; do
    echo "==== $name: every nemesis, then $mixed mixed phases (seed $seed), plain commands, lock.replicas auto"
    "$python" -m faults --server "$server" --module "$module" --nemeses all --mixed "$mixed" --seed "$seed" \
      --replicas 0 --server-replicas auto --node-workers 0 --rust-workers 0 --php-workers 0 \
      --label "$name-server-wait-seed-$seed" >/dev/null || status=1
    echo "     target/faults/$name-server-wait-seed-$seed.md"
  done
done
echo "==== took $((SECONDS - started)) s; exit status $status"
exit $status

#!/usr/bin/env bash
# `make peers-latest` (not part of `make test`): runs the peers' suites against the
# registries' newest releases beside the pinned ones (scripts/pins.txt), and prints a table:
# peer, pinned version, newest version, passed/failed on each.
#   redis-py      its own lock tests (sync and asyncio, RESP2 and RESP3) against the
#                 Python package, and the conformance scenarios' Python driver
#   ioredis       the conformance scenarios' Node driver, and node-redlock's own tests
#   node-redlock  its own tests (from its repository: NODE_REDLOCK_GIT, a snapshot on
#                 this machine, or a clone) against the Node package
# Runs on REDIS_SERVER (Debian's redis-server by default). When a newer release passes,
# moving its pin is changing one line of scripts/pins.txt. Needs the registries (pip, npm).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
work=$root/target/peers-latest
mkdir -p "$work"
pin() { awk -v kind="$1" -v name="$2" '$1 == kind && $2 == name { print $3 }' scripts/pins.txt; }

make deps deps-test >/dev/null || exit 1
python=$(scripts/test-env.sh | head -1) || exit 1

# The newest releases.
newest_redis_py=$("$python" -m pip index versions redis 2>/dev/null | sed -n 's/^redis (\(.*\))$/\1/p')
newest_ioredis=$(npm view ioredis version 2>/dev/null)
[ -n "$newest_redis_py" ] && [ -n "$newest_ioredis" ] \
  || { echo "cannot read the newest releases from the registries" >&2; exit 1; }
pinned_ioredis=$(node -p "require('$root/clients/node/node_modules/ioredis/package.json').version")
redlock_git=${NODE_REDLOCK_GIT:-$root/target/peer-tests/node-redlock/node-redlock.git}
pinned_redlock=$(pin snapshot node-redlock)
newest_redlock=$(git --git-dir="$redlock_git" rev-parse HEAD 2>/dev/null || echo "$pinned_redlock")

# A virtualenv with the newest redis-py (the other pins as they are), and a copy of the
# Node package with the newest ioredis.
sed "s/^\(pip  *redis  *\)[^ ]*/\1$newest_redis_py/" scripts/pins.txt >"$work/pins.txt"
latest_python=$(scripts/test-env.sh --pins "$work/pins.txt" --into "$work" --no-oldest) || exit 1
rm -rf "$work/node" && mkdir -p "$work/node"
cp -r clients/node/package.json clients/node/index.* clients/node/lib "$work/node/"
(cd "$work/node" && npm install --silent --no-audit --no-fund --no-save \
  "ioredis@$newest_ioredis" redis typescript >/dev/null) || exit 1

# run <log> <command...>: "passed" or "failed", the log kept under target/peers-latest.
run() {
  local log=$work/$1
  shift
  if "$@" >"$log" 2>&1; then echo passed; else echo "failed ($log)"; fi
}
# packages NAME=value ... -- TEST: one test of the packages suite, with those variables.
packages() {
  local vars=()
  while [ "$1" != -- ]; do vars+=("$1"); shift; done
  shift
  env "${vars[@]}" cargo test --release -p redis-lock-client --test packages -- --exact "$@"
}
# redis-py's lock tests: a test for each protocol.
suite=(redis_py_lock_suite::redis_py_lock_tests_pass_against_the_package_on_resp2
  redis_py_lock_suite::redis_py_lock_tests_pass_against_the_package_on_resp3)
# The Python and Node drivers (the ones on redis-py and ioredis).
conformance=(conformance::the_python_package_behaves_as_the_conformance_scenarios_say
  conformance::the_node_package_behaves_as_the_conformance_scenarios_say)

echo "running the suites (minutes; logs in $work)" >&2
py_pinned=$(run redis-py-pinned.log packages PYTHON="$python" -- "${suite[@]}")
py_newest=$(run redis-py-newest.log packages PYTHON="$latest_python" -- "${suite[@]}")
conf_pinned=$(run conformance-pinned.log packages PYTHON="$python" -- "${conformance[@]}")
conf_newest=$(run conformance-newest.log packages PYTHON="$latest_python" \
  REDIS_LOCK_NODE_DIR="$work/node" -- "${conformance[@]}")
redlock_pinned=$(run node-redlock-pinned.log env NODE_REDLOCK_GIT="$redlock_git" \
  scripts/peer-tests/node-redlock/run.sh)
redlock_newest=$(run node-redlock-newest.log env NODE_REDLOCK_GIT="$redlock_git" \
  NODE_REDLOCK_REV=HEAD NPM_PEERS=latest scripts/peer-tests/node-redlock/run.sh)

row() { printf '| %s | %s | %s | %s | %s |\n' "$@"; }
echo
row "peer (suite)" "pinned" "newest" "on the pinned" "on the newest"
row "---" "---" "---" "---" "---"
row "redis-py (its lock tests)" "$(pin pip redis)" "$newest_redis_py" "$py_pinned" "$py_newest"
row "redis-py, ioredis (conformance scenarios)" "$(pin pip redis), $pinned_ioredis" \
  "$newest_redis_py, $newest_ioredis" "$conf_pinned" "$conf_newest"
row "node-redlock (its own tests), ioredis" "${pinned_redlock:0:7}, $(pin npm-peer ioredis)" \
  "${newest_redlock:0:7}, $newest_ioredis" "$redlock_pinned" "$redlock_newest"
echo
echo "A newer release that passes: move its line in scripts/pins.txt (the Node package's"
echo "ioredis: clients/node/package-lock.json, npm install ioredis@<version> there)."
case "$py_pinned $py_newest $conf_pinned $conf_newest $redlock_pinned $redlock_newest" in
  *failed*) exit 1 ;;
esac

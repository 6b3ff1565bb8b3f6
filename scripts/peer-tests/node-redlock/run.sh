#!/bin/bash
# Runs node-redlock's own tests (v5: src/single.test.ts and src/multi.test.ts, with ava
# and ioredis) against this repository's Node package, on one instance, three, a
# cluster and three clusters, each a real server with the freshly built module. Their
# tests are fetched from the public repository into target/peer-tests (never committed);
# adapt.py changes only hosts (to loopback ports) and GETs of a lock's value (the
# recipe's internals: harness.js reads the module's lock instead). Needs git, node, npm.
#   scripts/peer-tests/node-redlock/run.sh            # Debian's redis-server
#   REDIS_SERVER=path/to/valkey-server scripts/peer-tests/node-redlock/run.sh
#   NODE_REDLOCK_GIT=path/to/node-redlock/.git ...   # a snapshot already on the machine
# The commit of node-redlock's tests and the versions of ava, ioredis and typescript are
# the `snapshot` and `npm-peer` lines of scripts/pins.txt; `make peers-latest` runs it with
# NODE_REDLOCK_REV=HEAD (the snapshot's newest commit) and NPM_PEERS=latest (the newest
# ioredis) instead.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
WORK=$ROOT/target/peer-tests/node-redlock
SERVER=${REDIS_SERVER:-redis-server}
CLI=redis-cli
MODULE=$ROOT/target/release/libredis_lock.so
BASE=${PEER_TEST_PORT:-17501}
pin() { awk -v kind="$1" -v name="$2" '$1 == kind && $2 == name { print $3 }' "$ROOT/scripts/pins.txt"; }
REV=${NODE_REDLOCK_REV:-$(pin snapshot node-redlock)}
# NPM_PEERS=latest floats the peer under test, ioredis; the test tools (ava, typescript)
# stay pinned: their newest releases are not what this run is about.
npm_peer() {
  if [ "${NPM_PEERS:-}" = latest ] && [ "$1" = ioredis ]; then echo "$1@latest"; else echo "$1@$(pin npm-peer "$1")"; fi
}
(cd "$ROOT" && cargo build --release --quiet)
rm -rf "$WORK/data"   # a cluster node's nodes.conf from a previous run would refuse to join anew
mkdir -p "$WORK/build" "$WORK/data"
GIT=${NODE_REDLOCK_GIT:-$WORK/node-redlock.git}
[ -d "$GIT" ] || git clone --quiet --bare --depth 1 https://github.com/mike-marcacci/node-redlock "$GIT"
cd "$WORK"
cat > package.json <<JSON
{ "name": "node-redlock-peer-tests", "private": true, "type": "module",
  "ava": { "files": ["build/*.test.js"], "timeout": "180s" } }
JSON
wanted="$(npm_peer ava) $(npm_peer ioredis) $(npm_peer typescript)"
if [ "$(cat installed 2>/dev/null)" != "$wanted" ]; then
  rm -rf node_modules package-lock.json
  # shellcheck disable=SC2086
  npm install --loglevel=error --no-audit --no-fund $wanted "$ROOT/clients/node"
  echo "$wanted" > installed
fi
git --git-dir="$GIT" rev-parse --verify --quiet "$REV^{commit}" >/dev/null \
  || { echo "node-redlock's snapshot has no commit $REV (fetch a newer one)" >&2; exit 1; }
echo "node-redlock at $(git --git-dir="$GIT" rev-parse "$REV"), with $wanted"
for t in single multi; do
  git --git-dir="$GIT" show "$REV:src/$t.test.ts" > "build/$t.orig.ts"
  python3 "$HERE/adapt.py" "build/$t.orig.ts" "build/$t.test.ts"
done
cp "$HERE/harness.js" "$HERE/index.js" build/
node -e "const ts=require('typescript'),fs=require('fs');for(const f of ['build/single.test.ts','build/multi.test.ts']){fs.writeFileSync(f.replace(/ts\$/,'js'),ts.transpileModule(fs.readFileSync(f,'utf8'),{compilerOptions:{module:ts.ModuleKind.ES2022,target:ts.ScriptTarget.ES2022}}).outputText)}"

PORTS=$(seq "$BASE" $((BASE + 15)))
stop() { for p in $PORTS; do $CLI -p "$p" shutdown nosave >/dev/null 2>&1 || true; done; }
trap stop EXIT
start() { mkdir -p "data/$1"; (cd "data/$1" && "$SERVER" --port "$1" --bind 127.0.0.1 --save '' --appendonly no --loadmodule "$MODULE" --daemonize yes --logfile "../$1.log" "${@:2}"); }
for i in 0 1 2 3; do start $((BASE + i)); done
for i in $(seq 4 15); do start $((BASE + i)) --cluster-enabled yes --cluster-config-file nodes.conf; done
for p in $PORTS; do until $CLI -p "$p" ping >/dev/null 2>&1; do sleep 0.1; done; done
for c in 4 7 10 13; do
  p=$((BASE + c)); rm -f "data/$p/dump.rdb"
  $CLI --cluster create 127.0.0.1:$p 127.0.0.1:$((p + 1)) 127.0.0.1:$((p + 2)) --cluster-replicas 0 --cluster-yes >/dev/null
done
export SINGLE=$BASE MULTI_A=$((BASE + 1)) MULTI_B=$((BASE + 2)) MULTI_C=$((BASE + 3))
export SINGLE_CLUSTER=$((BASE + 4)) MULTI_CLUSTER_A=$((BASE + 7)) MULTI_CLUSTER_B=$((BASE + 10)) MULTI_CLUSTER_C=$((BASE + 13))
# Nothing is filtered: the package's own connections to an unreachable server (a waiting
# acquire's duplicate) have an error listener, so ioredis prints no "Unhandled error
# event" (20 of them before it had one).
npx ava 2>&1

#!/usr/bin/env bash
# `make test-loaded`: the whole suite (scripts/test-servers.sh, as `make test`) with a
# CPU hog on every core beside it, so that a test that needs the machine idle fails here
# first. The hog is Debian's stress-ng (`--cpu N`, one busy worker a core, at the lowest
# priority the tests' own processes also may get: nice 0), or plain busy loops where it
# is missing; started before the suite, stopped when it ends, whatever ends it.
set -uo pipefail
cd "$(dirname "$0")/.."

cores=$(nproc)
hog=()
stop_hog() {
  [ "${#hog[@]}" -gt 0 ] && kill "${hog[@]}" 2>/dev/null
  wait "${hog[@]}" 2>/dev/null
  hog=()
}
trap stop_hog EXIT
trap 'exit 130' INT TERM

if command -v stress-ng >/dev/null 2>&1; then
  stress-ng --cpu "$cores" --cpu-method loop --quiet &
  hog+=($!)
  echo "==== load: stress-ng --cpu $cores beside the suite"
else
  for _ in $(seq 1 "$cores"); do
    (while :; do :; done) &
    hog+=($!)
  done
  echo "==== load: $cores busy loops beside the suite (no stress-ng)"
fi
scripts/test-servers.sh

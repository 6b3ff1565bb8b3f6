#!/usr/bin/env bash
# `make flaky`: the flake hunter. Builds every test once, then runs the chosen test
# binaries RUNS times on the chosen servers and prints, per test and server, how often it
# failed. Each round runs every chosen (binary, server) pair, TEST_JOBS at once with
# TEST_THREADS tests each, as `make test` does, so the tests meet the same load.
#   RUNS      how many rounds (default 20)
#   BIN       the test binaries, by name (`packages server`; default every suite)
#   FILTER    a test-name filter, as `cargo test` takes (default every test)
#   SERVERS   the servers, by the names scripts/fetch-servers.sh prints (`redis-7.0
#             valkey-8.1.8`; default all of them); REDIS_SERVER=path for another one
# Exits non-zero if any test failed once. A failing run's output is kept under
# target/flaky/ (one file a failing run).
set -uo pipefail
cd "$(dirname "$0")/.."

runs=${RUNS:-20}
jobs=${TEST_JOBS:-4}
threads=${TEST_THREADS:-4}
run_timeout=${RUN_TIMEOUT:-600}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. scripts/test-lib.sh
keep=target/flaky
rm -rf "$keep" && mkdir -p "$keep"

scripts/install-deps.sh --test >/dev/null || exit 1
echo "==== building every test once"
build_tests || exit 1

mapfile -t servers < <(list_servers)
if [ -n "${SERVERS:-}" ]; then
  mapfile -t servers < <(for wanted in $SERVERS; do
    printf '%s\n' "${servers[@]}" | awk -v n="$wanted" '$1 == n'
  done)
fi
[ "${#servers[@]}" -gt 0 ] || { echo "no server matches SERVERS='${SERVERS:-}'"; exit 1; }
unsupported=$(unsupported_server)
[ -n "$unsupported" ] && export UNSUPPORTED_SERVER="$unsupported"
list_binaries | awk '$1 == "suite"' >"$work/binaries" || exit 1
if [ -n "${BIN:-}" ]; then
  awk -v wanted="$BIN" 'BEGIN { n = split(wanted, w, /[ ,]+/); for (i = 1; i <= n; i++) keep[w[i]] = 1 }
    keep[$2]' "$work/binaries" >"$work/chosen"
else
  cp "$work/binaries" "$work/chosen"
fi
[ -s "$work/chosen" ] || { echo "no test binary matches BIN='${BIN:-}'"; exit 1; }

pairs=()
while read -r _ name dir executable; do
  for target in "${servers[@]}"; do
    pairs+=("$name|$dir|$executable|${target%% *}|${target#* }")
  done
done <"$work/chosen"
echo "==== $runs rounds of ${#pairs[@]} runs: $(printf '%s\n' "${pairs[@]}" | cut -d'|' -f1,4 | tr '|\n' '@ ')"

# One run: its log, then one line per test, "<result> <server> <test>", into the tally.
run_pair() {
  local round=$1 index=$2 name dir executable server_name server log
  IFS='|' read -r name dir executable server_name server <<<"${pairs[$index]}"
  log="$work/$round-$index.log"
  run_binary "$dir" "$executable" "$server" "$threads" ${FILTER:+"$FILTER"} >"$log" 2>&1
  local status=$?
  sed -nE 's/^test (.*) \.\.\. (ok|FAILED)$/\2 '"$server_name"' '"$name"'::\1/p' "$log" >>"$work/tally.$round.$index"
  if [ "$status" -ne 0 ]; then
    # A run that failed without a test that failed (killed, a crash): counted as its own.
    grep -q "^FAILED " "$work/tally.$round.$index" \
      || echo "FAILED $server_name $name::(the run itself: exit $status)" >>"$work/tally.$round.$index"
    cp "$log" "$keep/$name-$server_name-round-$round.log"
  fi
}

started=$SECONDS
for round in $(seq 1 "$runs"); do
  running=0
  for index in "${!pairs[@]}"; do
    if [ "$running" -ge "$jobs" ]; then
      wait -n
      running=$((running - 1))
    fi
    run_pair "$round" "$index" &
    running=$((running + 1))
  done
  wait
  failures=$(cat "$work"/tally."$round".* 2>/dev/null | grep -c '^FAILED ')
  echo "round $round of $runs: $failures failed ($((SECONDS - started)) s so far)"
done

echo
echo "==== failures per test and server, over $runs rounds"
cat "$work"/tally.* | awk '
  { key = $2 " " $3; runs[key]++; if ($1 == "FAILED") failed[key]++ }
  END {
    for (key in runs) { split(key, part, " "); printf "%3d of %3d  %-14s %s\n", failed[key], runs[key], part[1], part[2] }
  }' | sort -k1,1nr -k5 >"$work/table"
cat "$work/table"
total=$(awk '{ s += $1 } END { print s + 0 }' "$work/table")
tests=$(wc -l <"$work/table")
echo
echo "flaky: $tests tests x servers, $total failed runs in $runs rounds ($((SECONDS - started)) s)"
[ "$total" -eq 0 ]

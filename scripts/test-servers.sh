#!/usr/bin/env bash
# Runs the whole suite, `make test`:
#   1. builds every test binary once (`cargo test --release --workspace --no-run`);
#   2. runs the doc tests and the unit tests of every crate once: they need no server;
#   3. runs every integration test binary (the module's server, cluster, fuzz and docs
#      suites, the clients' and the bench's) once per server: on the one REDIS_SERVER
#      names if it is set, else on every server scripts/fetch-servers.sh provides (Redis
#      7.0.15 from Debian, Redis 8.2.3, Valkey 8.1.8 and 9.1.2).
# The binaries run directly, not through `cargo test` (which holds the build directory's
# lock while its tests run), TEST_JOBS (default 4) at once, each with TEST_THREADS
# (default 4) tests at once: the tests mostly wait on servers, so on two cores this is what
# makes the suite take minutes. Each binary's output is printed whole as soon as it ends,
# headed with the server it ran on and followed by the time it took; the summary names
# every run that failed.
# A run that takes longer than RUN_TIMEOUT seconds (default 900: the longest takes about
# a minute and a half) is killed with every process it started (its servers too), and fails:
# a test that hangs fails the suite with its name (libtest names every test running for
# over 60 s) instead of stalling it. No run reads the terminal: stdin is /dev/null.
# TEST_FILTER (a test-name filter, as `cargo test` takes) narrows every binary's tests.
set -uo pipefail
cd "$(dirname "$0")/.."

jobs=${TEST_JOBS:-4}
threads=${TEST_THREADS:-4}
run_timeout=${RUN_TIMEOUT:-900}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
started=$SECONDS

# Beside the build, which keeps both cores busy on a fresh machine: the tests' pinned
# virtualenvs (scripts/test-env.sh) and the servers (scripts/fetch-servers.sh), mostly
# downloads and unpacking. Each is waited for, and its output shown, once the build ends.
scripts/test-env.sh >"$work/env.log" 2>&1 &
env_pid=$!
if [ -z "${REDIS_SERVER:-}" ]; then
  scripts/fetch-servers.sh >"$work/servers.txt" 2>"$work/servers.log" &
  servers_pid=$!
fi

echo "==== building every test once"
cargo test --release --workspace --no-run --message-format=json-render-diagnostics \
  >"$work/artifacts.json" || exit 1
echo "==== built in $((SECONDS - started)) s"
wait "$env_pid" || { cat "$work/env.log"; echo "scripts/test-env.sh failed"; exit 1; }
if [ -n "${REDIS_SERVER:-}" ]; then
  servers=("$REDIS_SERVER")
else
  wait "$servers_pid" || { cat "$work/servers.log"; echo "scripts/fetch-servers.sh failed"; exit 1; }
  listing=$(cat "$work/servers.txt")
  mapfile -t servers < <(grep -v '^unsupported-' <<<"$listing" | cut -d' ' -f2-)
  unsupported=$(grep '^unsupported-' <<<"$listing" | head -1 | cut -d' ' -f2-)
  [ -n "$unsupported" ] && export UNSUPPORTED_SERVER="$unsupported"
fi
# The test build leaves the module in target/release/deps only; put it where `make run`
# (which the docs tests run) and the README look, so nothing rebuilds it under the tests.
module=target/release/libredis_lock.so
if [ ! -e "$module" ] || [ "target/release/deps/libredis_lock.so" -nt "$module" ]; then
  cp -p target/release/deps/libredis_lock.so "$module.new" && mv "$module.new" "$module" || exit 1
fi
# The benchmark's floor module (bench/floor), which its smoke test loads beside ours.
cargo build --release -p redis-lock-floor || exit 1
# One line per test binary: kind (unit or suite), the directory cargo would run it in
# (its crate's), the executable. Suites first, longest first, so the pool ends together.
python3 - "$work/artifacts.json" >"$work/binaries" <<'EOF'
import json, os, sys
order = ["packages", "server", "smoke", "cluster", "client", "docs", "fuzz"]
rows = []
for line in open(sys.argv[1]):
    art = json.loads(line)
    if art.get("reason") != "compiler-artifact" or not art.get("executable"):
        continue
    if not art["profile"]["test"]:
        continue
    target = art["target"]
    kind = "suite" if target["kind"] == ["test"] else "unit"
    rank = order.index(target["name"]) if target["name"] in order else len(order)
    rows.append((kind == "unit", rank, kind, os.path.dirname(art["manifest_path"]), art["executable"]))
for row in sorted(rows):
    print(*row[2:])
EOF

# Runs a command with the time limit: timeout makes it a process group of its own and, at
# the limit, signals the whole group (TERM, then KILL 10 s later). Prints how it ended.
limited() {
  local started=$SECONDS status
  timeout --kill-after=10 "$run_timeout" "$@" </dev/null
  status=$?
  if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
    echo "==== KILLED: still running after ${run_timeout} s (RUN_TIMEOUT)"
  fi
  echo "==== took $((SECONDS - started)) s, exit status $status"
  return "$status"
}

# Prints a finished run's log whole, never interleaved with another's.
show() {
  flock "$work/output.lock" cat "$1"
}

echo "==== the doc tests"
limited cargo test --release --workspace --doc ${TEST_FILTER:+"$TEST_FILTER"} >"$work/doc.log" 2>&1
echo $? >"$work/doc.status"
show "$work/doc.log"

# One run: a binary on a server (or none). Writes <id>.log and <id>.status, then prints
# the log.
run_one() {
  local id=$1 dir=$2 executable=$3 server=$4 name
  name=$(basename "$executable" | sed 's/-[0-9a-f]*$//')
  {
    echo
    echo "==== $name on ${server:-no server} ($(basename "$(dirname "$dir")")/$(basename "$dir"))"
    (cd "$dir" && REDIS_SERVER="$server" limited "$executable" --test-threads="$threads" \
      ${TEST_FILTER:+"$TEST_FILTER"})
    echo $? >"$work/$id.status"
  } >"$work/$id.log" 2>&1
  show "$work/$id.log"
}

ids=()
labels=()
running=0
next=0
while read -r kind dir executable; do
  if [ "$kind" = unit ]; then
    targets=("")
  else
    targets=("${servers[@]}")
  fi
  for server in "${targets[@]}"; do
    if [ "$running" -ge "$jobs" ]; then
      wait -n
      running=$((running - 1))
    fi
    id=$next
    next=$((next + 1))
    ids+=("$id")
    labels+=("$(basename "$executable" | sed 's/-[0-9a-f]*$//') on ${server:-no server}")
    run_one "$id" "$dir" "$executable" "$server" &
    running=$((running + 1))
  done
done <"$work/binaries"
wait

failed=()
passed_total=0
failed_total=0
# report: log, status file, label
report() {
  local log=$1 status_file=$2 label=$3 status passed failures
  status=$(cat "$status_file" 2>/dev/null || echo 1)
  passed=$(grep -Eo '^test result: [a-zA-Z]+\. [0-9]+ passed' "$log" | awk '{s+=$4} END {print s+0}')
  failures=$(grep -Eo '[0-9]+ failed;' "$log" | awk '{s+=$1} END {print s+0}')
  passed_total=$((passed_total + passed))
  failed_total=$((failed_total + failures))
  if [ "$status" -ne 0 ]; then
    failed+=("$label")
    [ "$failures" -gt 0 ] || failed_total=$((failed_total + 1))
  fi
}
report "$work/doc.log" "$work/doc.status" "the doc tests"
for index in "${!ids[@]}"; do
  report "$work/${ids[$index]}.log" "$work/${ids[$index]}.status" "${labels[$index]}"
done

echo
if [ "${#failed[@]}" -gt 0 ]; then
  printf 'FAILED: %s\n' "${failed[@]}"
else
  echo "the suite passed: ${#ids[@]} runs of the test binaries, on ${#servers[@]} servers"
fi
echo "==== make test took $((SECONDS - started)) s (the build included)"
echo "total: $passed_total passed, $failed_total failed"
[ "${#failed[@]}" -eq 0 ]

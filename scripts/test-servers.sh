#!/usr/bin/env bash
# Runs the whole suite, `make test`:
#   1. builds every test binary once, the modules with them (scripts/test-lib.sh);
#   2. runs the doc tests and the unit tests of every crate once: they need no server;
#   3. runs every integration test binary (the module's server, cluster, fuzz, faults and
#      docs suites, the clients' and the bench's) on the servers the table below gives
#      it: on the one REDIS_SERVER names if it is set, else on the servers
#      scripts/fetch-servers.sh provides (Redis 7.0.15 from Debian, Redis 8.2.3, Valkey
#      8.1.8 and 9.1.2).
# The binaries run directly, not through `cargo test` (which holds the build directory's
# lock while its tests run), TEST_JOBS (default 6) at once, each with TEST_THREADS
# (default 4; 8 for the packages binary, whose tests wait on other programs for over three
# quarters of their time) tests at once: the tests mostly wait on servers, so on two cores
# this is what makes the suite take minutes (each run's processor time is printed beside
# its time). Each binary's output is printed whole as soon as it ends,
# headed with the server it ran on and followed by the time it took; the summary names
# every run that failed and the ten slowest.
# A run that takes longer than RUN_TIMEOUT seconds (default 600: the longest takes about
# three minutes on a loaded machine) is killed with every process it started (its servers
# too), and fails: a test that hangs fails the suite with its name (libtest names every
# test running for over 60 s) instead of stalling it. No run reads the terminal: stdin is
# /dev/null. TEST_FILTER (a test-name filter, as `cargo test` takes) narrows every
# binary's tests. Nothing is ever run twice: a failure is the verdict.
set -uo pipefail
cd "$(dirname "$0")/.."

jobs=${TEST_JOBS:-6}
threads=${TEST_THREADS:-4}
run_timeout=${RUN_TIMEOUT:-600}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
started=$SECONDS
. scripts/test-lib.sh

# Where each suite runs. Every suite that tests the module's own behaviour runs on every
# server: the server suite, cluster, fuzz, faults, docs, the client crate's, the command
# line's (cli: seconds per server, and its status reads the module's replies), and in the
# packages binary the conformance scenarios (every package, the module's replies as
# each package reads them), the docs' snippets and the PHP checks. The rest proves
# something that does not change with the server, so one server (or one per path the
# code takes) is the whole proof. A line: binary, test-name filter (`*`: the whole
# binary), the servers it runs on (names as scripts/fetch-servers.sh prints them), why.
# A test that no line names runs everywhere; a server that REDIS_SERVER names runs all.
placement() {
  cat <<'TABLE'
packages redis_py_lock_suite::redis_py_lock_tests_pass_against_the_package_on_resp2 redis-8.2.3 redis-py's own lock tests prove the Python package against its peer's API, which is the same on every server: RESP2 on one server, RESP3 on another (the two are a minute or more each, and run beside each other so)
packages redis_py_lock_suite::redis_py_lock_tests_pass_against_the_package_on_resp3 valkey-8.1.8 as RESP2's line: RESP3 on the server whose packages run is the shortest
packages oldest_redis_py redis-8.2.3 the oldest redis-py proves the package's calls into redis-py, not the server
packages installs_beside_python_redis_lock valkey-8.1.8 an install beside python-redis-lock is a question of Python's import paths
packages type_checks_strictly valkey-8.1.8 mypy reads the code; no server answers it
packages typescript_declarations valkey-8.1.8 tsc reads the declarations; no server answers it
packages fail_without_the_module valkey-8.1.8 proves the package suites fail on a server without the module: one server without it is the proof
packages the_python_package_installs_and_passes_its_pytest_suite redis-7.0,valkey-9.1.2 the package's own suite, once per path it takes: Redis 7.0 (the package waits for replicas itself) and the newest server (the server waits); the module's replies on every server are the conformance scenarios'
packages the_node_package_passes_its_tests redis-7.0,valkey-9.1.2 as the Python package's own suite: once per path the package takes
smoke * valkey-9.1.2 the benchmark program runs to its report, every scenario on both sides (the REPLICAS one needs a server that waits: the newest); what it measures is timed by `make bench`, and the module's behaviour is the server suite's
TABLE
}

# The `--skip` arguments for `binary` on server `name`: the tests the table places
# elsewhere. Prints "none" when the whole binary runs elsewhere.
skips() {
  local binary=$1 name=$2 row_binary filter where reason
  [ -n "${REDIS_SERVER:-}" ] && return
  while read -r row_binary filter where reason; do
    [ "$row_binary" = "$binary" ] || continue
    case ",$where," in *",$name,"*) continue ;; esac
    if [ "$filter" = "*" ]; then
      echo none
      return
    fi
    printf -- '--skip\n%s\n' "$filter"
  done < <(placement)
}

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
build_tests || exit 1
echo "==== built in $((SECONDS - started)) s"
wait "$env_pid" || { cat "$work/env.log"; echo "scripts/test-env.sh failed"; exit 1; }
if [ -z "${REDIS_SERVER:-}" ]; then
  wait "$servers_pid" || { cat "$work/servers.log"; echo "scripts/fetch-servers.sh failed"; exit 1; }
fi
mapfile -t servers < <(list_servers)
[ "${#servers[@]}" -gt 0 ] || { echo "no server to test on"; exit 1; }
unsupported=$(unsupported_server)
[ -n "$unsupported" ] && export UNSUPPORTED_SERVER="$unsupported"
list_binaries >"$work/binaries" || exit 1

# Prints a finished run's log whole, never interleaved with another's.
show() {
  flock "$work/output.lock" cat "$1"
}

# The previous release's module, for tests/upgrade/: built beside the first runs, which
# mostly wait on servers; an upgrade test that comes first waits for it (a lock file),
# and says why if it cannot be built.
scripts/previous-release.sh >"$work/previous.log" 2>&1 &

echo "==== the doc tests"
(limited cargo test --release --workspace --doc ${TEST_FILTER:+"$TEST_FILTER"}) >"$work/doc.log" 2>&1
echo $? >"$work/doc.status"
show "$work/doc.log"

# How many tests of `binary` run at once: the packages binary's mostly wait on the
# packages' drivers and suites (Python, Node, PHP programs), so twice as many.
threads_for() {
  if [ "$1" = packages ] && [ -z "${TEST_THREADS:-}" ]; then
    echo $((threads * 2))
  else
    echo "$threads"
  fi
}

# One run: a binary on a server (or none). Writes <id>.log and <id>.status, then prints
# the log.
run_one() {
  local id=$1 name=$2 dir=$3 executable=$4 server=$5
  shift 5
  {
    echo
    echo "==== $name on ${server:-no server} ($(basename "$(dirname "$dir")")/$(basename "$dir"))"
    run_binary "$dir" "$executable" "$server" "$(threads_for "$name")" ${TEST_FILTER:+"$TEST_FILTER"} "$@"
    echo $? >"$work/$id.status"
  } >"$work/$id.log" 2>&1
  show "$work/$id.log"
}

ids=()
labels=()
running=0
next=0
while read -r kind name dir executable; do
  if [ "$kind" = unit ]; then
    targets=("none ")
  else
    targets=("${servers[@]}")
  fi
  for target in "${targets[@]}"; do
    server_name=${target%% *} server=${target#* }
    mapfile -t skip < <([ "$kind" = unit ] || skips "$name" "$server_name")
    [ "${skip[0]:-}" = none ] && continue
    if [ "$running" -ge "$jobs" ]; then
      wait -n
      running=$((running - 1))
    fi
    id=$next
    next=$((next + 1))
    ids+=("$id")
    labels+=("$name on ${server:-no server}")
    run_one "$id" "$name" "$dir" "$executable" "$server" "${skip[@]}" &
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
echo "==== the slowest runs (time, processor time: the run's own, its servers' and helpers')"
for index in "${!ids[@]}"; do
  # Its time and processor time, from the line `limited` ended its log with.
  took=$(sed -nE 's/^==== took ([0-9]+) s \(processor time ([0-9]+) s\).*/\1 \2/p' \
    "$work/${ids[$index]}.log" | tail -1)
  echo "${took:-0 0} ${labels[$index]}"
done | sort -rn >"$work/times"
head -10 "$work/times" | awk '{ t = $1; c = $2; $1 = ""; $2 = ""; printf "%5d s %5d s %s\n", t, c, $0 }'
awk '{ t += $1; c += $2 } END { printf "all %d runs: %d s, %d s of processor time\n", NR, t, c }' "$work/times"
echo
if [ "${#failed[@]}" -gt 0 ]; then
  printf 'FAILED: %s\n' "${failed[@]}"
else
  echo "the suite passed: ${#ids[@]} runs of the test binaries, on ${#servers[@]} servers"
fi
echo "==== make test took $((SECONDS - started)) s (the build included)"
echo "total: $passed_total passed, $failed_total failed"
[ "${#failed[@]}" -eq 0 ]

# The steps `make test` (scripts/test-servers.sh) and `make flaky` (scripts/flaky.sh)
# share, sourced by both: build every test binary once, list them, list the servers, and
# run one binary on one server under a time limit. Expects `work` (a scratch directory)
# and `run_timeout` (seconds) to be set by the script that sources it.

# Builds every test binary once, and the module and the benchmark's floor module
# (bench/floor, which the smoke test loads beside ours) with them, in one cargo run:
# `cargo build --all-targets` is `cargo test --no-run` plus the libraries as their own
# crate types, with the features of the whole workspace at once (a build of the floor
# alone would resolve them apart, and build its dependencies again). Writes
# $work/artifacts.json.
build_tests() {
  cargo build --release --workspace --all-targets --message-format=json-render-diagnostics \
    >"$work/artifacts.json"
}

# One line per test binary of $work/artifacts.json: kind (unit or suite), name, the
# directory cargo would run it in (its crate's), the executable. Suites first, longest
# first, so that a pool of runs ends together.
list_binaries() {
  python3 - "$work/artifacts.json" <<'EOF'
import json, os, sys
order = ["packages", "server", "smoke", "faults", "client", "fuzz", "docs", "cluster"]
rows = []
for line in open(sys.argv[1]):
    art = json.loads(line)
    if art.get("reason") != "compiler-artifact" or not art.get("executable"):
        continue
    if not art["profile"]["test"] or not art["target"].get("test", True):
        continue  # not a test build, or a target that says `test = false`
    target = art["target"]
    kind = "suite" if target["kind"] == ["test"] else "unit"
    rank = order.index(target["name"]) if target["name"] in order else len(order)
    rows.append((kind == "unit", rank, kind, target["name"], os.path.dirname(art["manifest_path"]), art["executable"]))
for row in sorted(rows):
    print(*row[2:])
EOF
}

# The servers the suites run on, "<name> <binary>" a line: REDIS_SERVER alone (named
# after its file) when it is set, else every server scripts/fetch-servers.sh provides.
# Reads the fetcher's listing from $work/servers.txt when a background fetch left it
# there.
list_servers() {
  if [ -n "${REDIS_SERVER:-}" ]; then
    echo "$(basename "$REDIS_SERVER") $REDIS_SERVER"
    return
  fi
  server_listing | grep -v '^unsupported-'
}

# The server the module must refuse to load on (none with REDIS_SERVER).
unsupported_server() {
  [ -n "${REDIS_SERVER:-}" ] && return
  server_listing | grep '^unsupported-' | head -1 | cut -d' ' -f2-
}

# scripts/fetch-servers.sh's listing: the one a background fetch left in
# $work/servers.txt, else fetched now.
server_listing() {
  if [ -s "$work/servers.txt" ]; then
    cat "$work/servers.txt"
  else
    scripts/fetch-servers.sh
  fi
}

# Runs a command with the time limit: timeout makes it a process group of its own and, at
# the limit, signals the whole group (TERM, then KILL 10 s later). Prints how it ended.
# Also prints the processor time the run used, its servers and helpers included (what
# it costs the machine, beside the others: on two cores the suite's length is mostly the
# sum of these). Meant for a subshell of its own: `times` counts the shell's children.
limited() {
  local started=$SECONDS status cpu counted
  timeout --kill-after=10 "$run_timeout" "$@" </dev/null
  status=$?
  if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
    echo "==== KILLED: still running after ${run_timeout} s (RUN_TIMEOUT)"
  fi
  counted="$work/times.$BASHPID"
  times >"$counted"  # in this shell: a command substitution would count its own children
  cpu=$(tail -1 "$counted" | awk '{ n = 0; for (i = 1; i <= NF; i++) { split($i, p, "m"); n += p[1] * 60 + p[2] } printf "%d", n }')
  rm -f "$counted"
  echo "==== took $((SECONDS - started)) s (processor time ${cpu} s), exit status $status"
  return "$status"
}

# One run of a test binary: `run_binary <dir> <executable> <server> <threads> [arg ...]`,
# in its crate's directory, on `server` (none: empty), the extra arguments (a test-name
# filter, --skip ...) passed on. Prints the binary's output and how it ended.
run_binary() {
  local dir=$1 executable=$2 server=$3 threads=$4
  shift 4
  (cd "$dir" && REDIS_SERVER="$server" limited "$executable" --test-threads="$threads" "$@")
}

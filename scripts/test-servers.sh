#!/usr/bin/env bash
# Runs the whole suite (`cargo test --release --workspace`) once per server: on the one
# REDIS_SERVER names if it is set, else on every server scripts/fetch-servers.sh provides
# (Redis 7.0.15 from Debian, Redis 8.2.3, Valkey 8.1.8 and 9.1.2). Each run is headed with
# the server's name and version; the summary names every server whose run failed.
set -uo pipefail
cd "$(dirname "$0")/.."

if [ -n "${REDIS_SERVER:-}" ]; then
  runs=("custom $REDIS_SERVER")
else
  listing=$(scripts/fetch-servers.sh) || exit 1
  mapfile -t runs < <(grep -v '^unsupported-' <<<"$listing")
  unsupported=$(grep '^unsupported-' <<<"$listing" | head -1 | cut -d' ' -f2-)
  [ -n "$unsupported" ] && export UNSUPPORTED_SERVER="$unsupported"
fi

failed=()
passed_total=0
failed_total=0
for run in "${runs[@]}"; do
  binary=${run#* }
  version=$("$binary" --version 2>/dev/null | cut -d' ' -f1,3 | sed 's/ v=/ /')
  echo
  echo "==== the suite on ${version:-$binary} ($binary)"
  log=$(mktemp)
  REDIS_SERVER="$binary" cargo test --release --workspace ${CARGO_TEST_ARGS:-} 2>&1 | tee "$log"
  status=${PIPESTATUS[0]}
  passed=$(grep -Eo '^test result: [a-zA-Z]+\. [0-9]+ passed' "$log" | awk '{s+=$4} END {print s+0}')
  failures=$(grep -Eo '[0-9]+ failed;' "$log" | awk '{s+=$1} END {print s+0}')
  rm -f "$log"
  passed_total=$((passed_total + passed))
  failed_total=$((failed_total + failures))
  if [ "$status" -ne 0 ]; then
    failed+=("${version:-$binary}")
    [ "$failures" -gt 0 ] || failed_total=$((failed_total + 1))
    echo "==== FAILED on ${version:-$binary} ($binary)"
  else
    echo "==== passed on ${version:-$binary}: $passed tests"
  fi
done

echo
if [ "${#failed[@]}" -gt 0 ]; then
  echo "the suite FAILED on: ${failed[*]}"
else
  echo "the suite passed on every server: ${#runs[@]} runs"
fi
echo "total: $passed_total passed, $failed_total failed"
[ "${#failed[@]}" -eq 0 ]

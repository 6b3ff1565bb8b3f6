#!/usr/bin/env bash
# Builds the previous release's module once and prints its path: the newest section of
# CHANGELOG.md that names a commit (`## 0.3.0 (commit 8576a67)`), checked out as a git
# worktree under target/upgrade/<version>/src and built there (its own target folder,
# no debug info, not optimized: it only has to load and answer, and builds in about 60 s
# of processor time instead of 90) into
# target/upgrade/<version>/target/release/libredis_lock.so. Later calls print the path
# at once; calls at the same time wait for the one that builds (a lock file).
# `make test` starts it beside the first tests, and tests/upgrade/ calls it.
set -euo pipefail
cd "$(dirname "$0")/.."

read -r version commit < <(sed -nE 's/^## ([0-9]+\.[0-9]+\.[0-9]+) \(commit ([0-9a-f]+)\)$/\1 \2/p' CHANGELOG.md | head -1) || true
[ -n "${commit:-}" ] || { echo "previous-release: CHANGELOG.md names no release commit" >&2; exit 1; }
dir=target/upgrade/$version
module=$dir/target/release/libredis_lock.so
mkdir -p target/upgrade
exec 9>target/upgrade/build.lock
flock 9
if [ "$(cat "$dir/built" 2>/dev/null)" != "$commit" ]; then
  if ! git cat-file -e "$commit^{commit}" 2>/dev/null; then
    # A shallow clone (a CI checkout): the history it lacks, from where it came.
    if [ "$(git rev-parse --is-shallow-repository 2>/dev/null)" = true ]; then
      git fetch --quiet --unshallow 2>/dev/null || git fetch --quiet origin "$commit" 2>/dev/null || true
    fi
  fi
  git cat-file -e "$commit^{commit}" 2>/dev/null || {
    echo "previous-release: this clone has no commit $commit (release $version): fetch the whole history (git fetch --unshallow)" >&2
    exit 1
  }
  rm -rf "$dir"
  git worktree prune
  git worktree add --quiet --detach "$dir/src" "$commit" >&2
  # The build's own settings only: nothing of a calling cargo's environment.
  env -u CARGO_TARGET_DIR -u CARGO_BUILD_TARGET_DIR -u CARGO_MANIFEST_DIR \
    CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_PROFILE_RELEASE_OPT_LEVEL=0 \
    cargo build --quiet --release --lib -p redis-lock \
    --manifest-path "$dir/src/Cargo.toml" --target-dir "$dir/target" >&2
  echo "$commit" >"$dir/built"
fi
echo "$PWD/$module"

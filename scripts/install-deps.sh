#!/usr/bin/env bash
# Installs what building and testing the module needs on a Debian machine, skipping
# what is already there: redis-server and redis-cli (7.0+), and libclang with its
# headers for the binding's bindgen step. Safe to run again.
set -euo pipefail

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
command -v cc >/dev/null 2>&1 || missing+=(gcc libc6-dev)
command -v make >/dev/null 2>&1 || missing+=(make)
# bindgen loads libclang at build time and needs clang's own headers (stddef.h).
if ! ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1 \
  || ! ls /usr/lib/llvm-*/lib/clang/*/include/stddef.h >/dev/null 2>&1; then
  missing+=(libclang)
fi

if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "missing: ${missing[*]}; install them with your package manager" >&2
  exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi

echo "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
packages=()
for name in "${missing[@]}"; do
  if [ "$name" = libclang ]; then
    # The smallest set that works on Debian 12 (libclang 14); elsewhere, the default.
    if apt-cache show libclang1-14 >/dev/null 2>&1; then
      packages+=(libclang1-14 libclang-common-14-dev)
    else
      packages+=(libclang-dev)
    fi
  else
    packages+=("$name")
  fi
done
$SUDO apt-get install -y -qq --no-install-recommends "${packages[@]}"

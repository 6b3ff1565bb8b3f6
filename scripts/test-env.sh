#!/usr/bin/env bash
# Makes the tests' Python environments from scripts/pins.txt, never touching the machine's
# own site-packages:
#   target/venv          the `pip` pins (redis-py, pytest, mypy, ...): what the tests run
#   target/venv-oldest   the same with the `oldest` pins: the oldest redis-py the Python
#                        package supports, whose own tests run there too
# Each is made again only when its pins changed (the list it was made from is kept in
# it). Installs with --no-deps, then `pip check`: a dependency missing from the pins fails
# here, not later. Prints the two interpreters' paths.
#   scripts/test-env.sh [--pins FILE] [--into DIR] [--no-oldest]   (DIR: target by default)
set -euo pipefail
cd "$(dirname "$0")/.."
pins=scripts/pins.txt
into=target
oldest=1
while [ $# -gt 0 ]; do
  case $1 in
    --pins) pins=$2; shift 2 ;;
    --into) into=$2; shift 2 ;;
    --no-oldest) oldest=0; shift ;;
    *) echo "usage: scripts/test-env.sh [--pins FILE] [--into DIR] [--no-oldest]" >&2; exit 2 ;;
  esac
done

# The requirement lines of one environment: the `pip` pins, with `oldest` replacing or
# adding lines when $1 is "oldest". Sorted, so the comparison with the kept list holds.
requirements() {
  awk -v flavour="$1" '
    $1 == "pip" { pin[$2] = $3 }
    $1 == "oldest" && flavour == "oldest" { pin[$2] = $3 }
    END { for (name in pin) print name "==" pin[name] }' "$pins" | sort
}

# A virtualenv needs python3's venv module, which Debian ships apart (python3-venv).
ensure_venv_module() {
  local probe
  probe=$(mktemp -d)
  if python3 -m venv "$probe/v" >/dev/null 2>&1; then
    rm -rf "$probe"
    return
  fi
  rm -rf "$probe"
  echo "installing: python3-venv (for the tests' virtualenvs)" >&2
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    python3-venv python3-pip >&2
}

make_env() {
  local dir=$1 flavour=$2 wanted
  wanted=$(requirements "$flavour")
  if [ -x "$dir/bin/python" ] && [ "$(cat "$dir/pins.txt" 2>/dev/null)" = "$wanted" ]; then
    return
  fi
  echo "making $dir from $pins ($flavour)" >&2
  ensure_venv_module
  rm -rf "$dir"
  python3 -m venv "$dir" >&2
  printf '%s\n' "$wanted" >"$dir/requirements.txt"
  "$dir/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
    -r "$dir/requirements.txt" >&2
  "$dir/bin/python" -m pip check >&2
  printf '%s\n' "$wanted" >"$dir/pins.txt"
}

mkdir -p "$into"
make_env "$into/venv" pip
[ "$oldest" = 0 ] || make_env "$into/venv-oldest" oldest
into=$(cd "$into" && pwd)
echo "$into/venv/bin/python"
[ "$oldest" = 0 ] || echo "$into/venv-oldest/bin/python"

#!/usr/bin/env bash
# The one entry point on a fresh machine (Python 3.11, pip, Java 17):
#   bash deploy/local.sh demo   - a local hub mesh with demo traffic
#   bash deploy/local.sh test   - the whole test suite
# Each builds .venv and installs what it needs first; a second run reuses it.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${PUB0SUB_VENV:-.venv}"
PY="${PYTHON:-python3}"

ensure_venv() {
  local extras="$1"
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  local stamp="$VENV/.installed-${extras//,/-}"
  local want
  want="$(sha256sum pyproject.toml | cut -c1-16)"
  if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]; then
    echo "local.sh: installing pub0sub[$extras] into $VENV ..." >&2
    "$VENV/bin/python" -m pip install -q --upgrade pip
    "$VENV/bin/python" -m pip install -q -e ".[$extras]"
    echo "$want" > "$stamp"
  fi
}

# Benchmarks and their smoke tests run real redis-server and nats-server; the status page is
# tested in headless Chromium (chromium, chromium-driver), the Wireshark dissector with tshark;
# the test bed cuts links in the kernel with nft (nftables) where it runs as root.
ensure_system_packages() {
  local missing=()
  command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
  command -v nats-server >/dev/null 2>&1 || [ -x /usr/sbin/nats-server ] || missing+=(nats-server)
  command -v chromium >/dev/null 2>&1 || missing+=(chromium)
  command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
  command -v tshark >/dev/null 2>&1 || missing+=(tshark)
  command -v nft >/dev/null 2>&1 || [ -x /usr/sbin/nft ] || missing+=(nftables)
  if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      echo "local.sh: apt-get install ${missing[*]}" >&2
      apt-get update -qq >/dev/null
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    else
      echo "local.sh: ${missing[*]} not installed; the tests that need them will be skipped" >&2
    fi
  fi
}

cmd="${1:-}"
shift || true
case "$cmd" in
  demo)
    ensure_venv dev
    exec "$VENV/bin/pub0sub" demo "$@"
    ;;
  test)
    ensure_venv dev
    ensure_system_packages
    # Three workers on two cores: the suite mostly waits on hubs, JVMs and subprocesses (two
    # workers kept the cores ~60% busy: 653 s against 509 s with three; four made a Spark Python
    # worker miss its connect-back timeout; docs/benchmarks.md, "The test suite's time").
    # tests/conftest.py groups the tests by module. Later options win: -n 0 runs it in one process.
    exec "$VENV/bin/python" -m pytest -n "${PUB0SUB_TEST_WORKERS:-3}" --dist loadgroup --no-loadscope-reorder "$@"
    ;;
  *)
    echo "usage: bash deploy/local.sh demo|test [args...]" >&2
    exit 2
    ;;
esac

#!/usr/bin/env bash
# Install botjax and what its tests need, on a fresh Debian/Ubuntu machine with Python >= 3.11.
#   bash scripts/setup.sh          runtime only (CPU jax), enough for experiments/quickstart.py
#   bash scripts/setup.sh test     + test extras, the pinned Node toolchain and Chromium (React rewards)
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:-run}"
PY="${PYTHON:-python3}"

"$PY" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
if [[ "$mode" == "test" ]]; then
  "$PY" -m pip install -q -e ".[cpu,test]"
else
  "$PY" -m pip install -q -e ".[cpu]"
fi

if [[ "$mode" == "test" ]]; then
  # React reward toolchain: Chromium from Debian, Node packages pinned by the lockfile.
  if ! command -v chromium >/dev/null 2>&1; then
    if [[ $(id -u) -eq 0 ]]; then
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
    else
      echo "setup.sh: chromium is missing; install it with 'sudo apt-get install chromium'" >&2
    fi
  fi
  if [[ -f botjax/rewards/react/node/package.json ]]; then
    command -v npm >/dev/null || { echo "setup.sh: npm is missing (apt-get install nodejs npm)" >&2; exit 1; }
    (cd botjax/rewards/react/node && npm ci --no-audit --no-fund --loglevel=error)
  fi
fi
echo "setup.sh: done ($mode)"

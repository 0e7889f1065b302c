#!/usr/bin/env bash
# Create .venv and install the project (CPU torch first: an unpinned torch pulls a CUDA build).
# Re-running is cheap: it reinstalls only when pyproject.toml changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
EXTRAS=${1:-dev,trainer}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
stamp=".venv/.installed-$(sha256sum pyproject.toml | cut -c1-16)-${EXTRAS//,/_}"
if [ ! -f "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q "torch==2.13.0"
  .venv/bin/python -m pip install -q -e ".[${EXTRAS}]"
  touch "$stamp"
fi

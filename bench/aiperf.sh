#!/usr/bin/env bash
# The third-party load generator against `reweighter serve`'s OpenAI embeddings route:
# NVIDIA's AIPerf (PyPI `aiperf`) in a venv of its own (.bench-venv/: its pins are not ours),
# set up once, then bench/bench_aiperf.py (AIPerf, our client and plain encode(32), one run).
#   bash bench/aiperf.sh [--n 256] [--keep DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${BENCH_VENV:-.bench-venv}
AIPERF_VERSION=${AIPERF_VERSION:-0.13.0}
if [ ! -f "$VENV/.aiperf-$AIPERF_VERSION" ]; then
  [ -x "$VENV/bin/python" ] || "${PYTHON:-python3}" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "aiperf==$AIPERF_VERSION"
  touch "$VENV/.aiperf-$AIPERF_VERSION"
fi
exec .venv/bin/python bench/bench_aiperf.py --aiperf "$VENV/bin/aiperf" "$@"

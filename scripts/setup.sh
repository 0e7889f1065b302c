#!/usr/bin/env bash
# Create .venv and install the project (CPU torch first: an unpinned torch pulls a CUDA build).
#   bash scripts/setup.sh                     # server,dev,trainer: everything the tests need
#   bash scripts/setup.sh server              # the service only
#   bash scripts/setup.sh ""                  # the light client alone (no torch, no server)
# Re-running is cheap: it reinstalls only when pyproject.toml changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
EXTRAS=${1-server,dev,trainer}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
stamp=".venv/.installed-$(cat pyproject.toml scripts/stacks-requirements.txt | sha256sum | cut -c1-16)-${EXTRAS//,/_}"
if [ ! -f "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  case ",${EXTRAS}," in *,server,*|*,dev,*|*,trainer,*)  # torch: the CPU build, before anything
    .venv/bin/python -m pip install -q "torch==2.13.0" ;;
  esac
  .venv/bin/python -m pip install -q -e ".${EXTRAS:+[${EXTRAS}]}"
  case ",${EXTRAS}," in *,dev,*|*,stacks,*)  # RL stacks for tests/integrations, deps-free
    .venv/bin/python -m pip install -q --no-deps --ignore-requires-python \
      -r scripts/stacks-requirements.txt ;;
  esac
  touch "$stamp"
fi

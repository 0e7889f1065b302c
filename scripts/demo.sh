#!/usr/bin/env bash
# The README's first command: set up .venv and run the demo on the embedded default
# (bundled MiniLM, CPU, in-process cache: no GPU, no Redis, no downloads).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev,trainer
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
exec .venv/bin/reweighter demo "$@"

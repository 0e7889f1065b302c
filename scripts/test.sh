#!/usr/bin/env bash
# The README's test command: set up .venv, then lint and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev,trainer
bash deploy/install-checkers.sh   # docker compose (static binary) and kubectl when missing
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
.venv/bin/ruff check .
.venv/bin/python -m pytest -q "$@"

#!/usr/bin/env bash
# The README's first command: set up .venv and run the demo on the embedded default
# (bundled MiniLM, CPU, in-process cache: no GPU, no Redis, no downloads). The demo starts
# `reweighter serve` and calls it over HTTP and gRPC, so it installs the `server` extra alone:
# no trainer, RL stacks or test tools (scripts/test.sh installs those).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh server
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
exec .venv/bin/reweighter demo "$@"

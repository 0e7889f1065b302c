#!/usr/bin/env bash
# The README's test commands: set up .venv, then lint and run the tests.
#   bash scripts/test.sh           # the whole suite (CI: .ci/run), the 25 slowest tests printed
#   bash scripts/test.sh --fast    # every test not marked slow (no `reweighter serve` child,
#                                  # Docker, vLLM, trainer run or fresh venv): about 3 minutes
# Further arguments go to pytest (`bash scripts/test.sh --fast tests/embedding -x`).
# REWEIGHTER_SKIP_SETUP=1 skips the setup steps (for a .venv that is set up already).
set -euo pipefail
cd "$(dirname "$0")/.."
select=()
if [ "${1-}" = "--fast" ]; then
  shift
  select=(-m "not slow")  # pyproject's markers say what is slow and why
fi
if [ "${REWEIGHTER_SKIP_SETUP-}" != 1 ]; then
  bash scripts/setup.sh dev,trainer
  bash deploy/install-checkers.sh   # docker compose (static binary) and kubectl when missing
  # Chromium + chromedriver from Debian's packages when missing (the dashboard's browser test;
  # it skips, saying so, where they cannot be installed)
  bash scripts/install-browser.sh || echo "[test] no Chromium: the browser test will skip" >&2
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
.venv/bin/ruff check .
.venv/bin/python -m pytest -q --durations=25 "${select[@]}" "$@"

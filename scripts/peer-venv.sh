#!/usr/bin/env bash
# Build infinity-emb's own venv at .peer-venv (git-ignored) for bench/bench_peer.py.
#   bash scripts/peer-venv.sh          # ~1 min, ~1.4 GB; PYTHON=python3.11 by default
# Its own venv because its pins clash with the project's (numpy<2, sentence-transformers<4,
# transformers<5, click<8.2, typer 0.12, uvicorn 0.32). torch goes in first, pinned to the CPU
# build on local disk: an unpinned torch would pull a multi-GB CUDA build. Then
# infinity-emb[server,torch] resolves normally with torch already satisfied (torch pinned again on
# the same line so pip cannot swap it); the versions it resolved to on 2026-11-25 are pinned below
# so a rebuild gets the same stack. optimum is not in [server,torch], so infinity's default
# --bettertransformer is a no-op here (it checks for optimum and skips).
# Idempotent: does nothing once the stamp for this script's content is there.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
VENV=.peer-venv
PINS=(
  "infinity-emb[server,torch]==0.0.78" "torch==2.13.0"
  "sentence-transformers==3.4.1" "transformers==4.57.6" "tokenizers==0.22.2"
  "huggingface_hub==0.36.2" "safetensors==0.8.0" "numpy==1.26.4"
  "fastapi==0.165.0" "starlette==1.10.0" "uvicorn[standard]==0.32.1" "httptools==0.9.0"
  "uvloop==0.23.0" "pydantic==2.14.4" "orjson==3.13.0" "typer==0.12.5" "click==8.1.8"
  "rich==13.9.4" "posthog==7.91.1" "prometheus-fastapi-instrumentator==8.1.0"
)
stamp="$VENV/.installed-$(sha256sum "$0" | cut -c1-16)"
if [ -f "$stamp" ]; then
  echo "peer-venv: $VENV already built ($stamp); nothing to do"
  exit 0
fi
if [ ! -x "$VENV/bin/python" ]; then
  echo "peer-venv: creating $VENV with $PY"
  "$PY" -m venv "$VENV"
fi
pip_install() {  # quiet, minus the local mirror's "Location ... is ignored" noise
  "$VENV/bin/python" -m pip install -q "$@" 2>&1 | { grep -v "is ignored: it is neither" || true; }
}
echo "peer-venv: pip install torch==2.13.0 (the CPU build from local disk, first)"
pip_install "torch==2.13.0"
echo "peer-venv: pip install ${PINS[*]}"
pip_install "${PINS[@]}"
"$VENV/bin/python" -m pip check
"$VENV/bin/python" -c "import torch, infinity_emb; print('peer-venv: torch', torch.__version__, \
'/ infinity_emb', infinity_emb.__version__)"
touch "$stamp"
echo "peer-venv: done; start it with $VENV/bin/infinity_emb v2 --help"

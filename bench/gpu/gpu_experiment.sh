#!/usr/bin/env bash
# The pre-registered picktwo main runs (EXPERIMENTS.md, amendment 4) on a lent GPU machine:
# scripts/experiment.sh's main mode, word for word in its arms, seeds, steps and evaluation,
# with `use_cpu=false` (fp32, TF32 off: torch's default) and the 12 seeds in 12 processes side
# by side against one Reweighter service on the same GPU. Nothing there can be downloaded, so
# what it needs travels in four calls (bench/gpu/gpu_experiment_carry.sh builds .gxA to .gxD):
#   device run, carry [.gxA]:  bash bench/gpu/gpu_experiment.sh stash      (then .gxB, then .gxC)
#   device run, carry [.gxD]:  bash bench/gpu/gpu_experiment.sh run        (timeout_s 590)
# made back to back (the machine goes back after 30 s idle and with it the stash). `run` stops
# the experiment at GX_LIMIT seconds (default 470), keeps every finished (arm, seed) run (they
# resume: experiment.py reuses OUT/runs), and returns it all in $OUT/picktwo-main.tgz with the
# logs. Unpack here: tar xzf picktwo-main.tgz -C experiments/
set -u
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-$ROOT/bench/out/gpu_experiment}
STASH=${GX_STASH:-/root/gx}
mkdir -p "$OUT" "$STASH"
for d in .gxA .gxB .gxC .gxD; do [ -d "$d" ] && cp -r "$d"/. "$STASH"/; done
echo "stash: $(ls "$STASH" | tr '\n' ' ')"
[ "${1:-}" = run ] || exit 0

T0=$SECONDS
LIMIT=${GX_LIMIT:-470}
NAME=picktwo-main
EXP=${GX_EXP:-$ROOT/experiments/$NAME}
NAME=$(basename "$EXP")
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 MPLBACKEND=Agg
export PYTHONPATH=$ROOT/services/reweighter:$ROOT/trainer:$ROOT/research:$STASH/py:/tmp/site
export REWEIGHTER_TRAINER_CACHE=/tmp/rwcache
LOG=$OUT/gpu_experiment.log
exec > >(tee -a "$LOG") 2>&1
# GX_PY=.venv/bin/python: a dry run here on CPU (no wheels installed; with GX_SEEDS=0,1
# GX_STEPS=1 GX_EVAL=1 GX_JOBS=2 GX_DEVICE=use_cpu=true it checks the whole path in minutes)
PY=${GX_PY:-python3}
if [ -z "${GX_PY:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "$STASH"/whl/*.whl || { echo "WHEEL INSTALL FAILED"; exit 3; }
fi
SEEDS=${GX_SEEDS:-0,1,2,3,4,5,6,7,8,9,10,11}
STEPS=${GX_STEPS:-50}
EVAL=${GX_EVAL:-27}
DEVICE=${GX_DEVICE:-use_cpu=false}
mkdir -p "$REWEIGHTER_TRAINER_CACHE/wheels"
W=$REWEIGHTER_TRAINER_CACHE/wheels/$(cut -d' ' -f3 "$STASH/llm.sha256")
cat "$STASH"/llm.part* > "$W"
(cd "$(dirname "$W")" && sha256sum -c "$STASH/llm.sha256") || { echo "POLICY WHEEL BAD"; exit 3; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
$PY - <<'EOF'
import importlib.metadata as m, platform, torch
print("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.cuda.is_available(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-")
for n in ("transformers", "trl", "datasets", "sentence-transformers", "accelerate", "pyarrow"):
    print(n, m.version(n))
EOF
POLICY=$($PY -m reweighter_trainer.policy) || { echo "POLICY CONVERSION FAILED"; exit 3; }
echo "policy $POLICY after $((SECONDS - T0)) s"

# MPS lets the 12 training processes' small kernels share the GPU instead of time-slicing it;
# where it cannot start, the runs go on without it
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p /tmp/mps /tmp/mps-log
MPS=off
if command -v nvidia-cuda-mps-control >/dev/null && nvidia-cuda-mps-control -d 2>/dev/null; then
  if timeout 40 $PY -c 'import torch; torch.ones(1, device="cuda").sum().item()'; then
    MPS=on
  else
    echo quit | nvidia-cuda-mps-control; sleep 2
  fi
fi
echo "MPS: $MPS"

PORT=$($PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
GPORT=$((PORT + 1))
mkdir -p "$EXP"
$PY -m reweighter serve --host 127.0.0.1 --http-port $PORT --grpc-port $GPORT --no-compile \
  > "$OUT/service.log" 2>&1 &
SERVICE=$!
# GX_PILOT=none: no pilot file (delta_2x then comes from the runs' own GRPO curves, computed
# afterwards: `python -m reweighter_research.decision --pilot DIR`, then --collect-only again)
PILOT=${GX_PILOT:-experiments/picktwo-pilot-lr5e-6/pilot.json}
# GX_RULE=wordadd: issue 40's rule (delta_2x from the runs' own GRPO curves, validity gates)
DECIDE=(--rule "${GX_RULE:-area}" --preregistered "${GX_PREREG:-$(cat experiments/picktwo-pilot/PREREGISTERED)}")
[ "$PILOT" != none ] && DECIDE+=(--pilot "$PILOT")
# shellcheck disable=SC2206  # GX_OVERRIDES: config key=value pairs, split on spaces
SETUP=(--config "${GX_CONFIG:-research/configs/smollm2-picktwo.yaml}" --out "$EXP"
       --url "http://127.0.0.1:$PORT"
       --methods "${GX_METHODS:-grpo,mmr,dra,darling,grpo-passk}" --seeds "$SEEDS"
       --steps "$STEPS" --eval-prompts "$EVAL" --samples 8 "${DECIDE[@]}" --no-dra-offline
       "$DEVICE" ${GX_OVERRIDES:-})
left=$((LIMIT - (SECONDS - T0)))
echo "experiment: ${left} s left of ${LIMIT}: ${SETUP[*]}"
# the main mode of scripts/experiment.sh, with the GPU's overrides
# GX_BASE_EVAL=0: no evaluation of the untrained policy (seconds a tight budget lacks)
BASE=(--base-eval); [ "${GX_BASE_EVAL:-1}" = 0 ] && BASE=()
timeout -k 15 "$left" $PY -m reweighter_research.experiment "${SETUP[@]}" "${BASE[@]}" \
  --jobs "${GX_JOBS:-12}" 2>&1 | tee -a "$EXP/experiment.log"
RC=${PIPESTATUS[0]}
echo "experiment rc=$RC after $((SECONDS - T0)) s"
if [ "$RC" != 0 ]; then  # stopped (or failed) before it wrote results.json itself
  pkill -f "reweighter_research.experiment.*$EXP"; sleep 2  # --jobs' children
  # results.json from whatever finished (the pre-registered rule needs every arm on every seed)
  $PY -m reweighter_research.experiment "${SETUP[@]}" --collect-only 2>&1 | tail -3
fi
$PY -m reweighter_research.plots "$EXP" 2>&1 | tail -2
kill "$SERVICE" 2>/dev/null
[ "$MPS" = on ] && echo quit | nvidia-cuda-mps-control
ls "$EXP/runs" | grep -c '\.json$' | sed 's/^/finished runs: /'
tar czf "$OUT/$NAME.tgz" --exclude "$NAME/train" -C "$(dirname "$EXP")" "$NAME"
echo "done after $((SECONDS - T0)) s"

#!/usr/bin/env bash
# GRPO vs MMR, DRA, Darling and GRPO with pass@k on SmolLM2-135M-Instruct (research/configs/smollm2-picktwo.yaml: the picktwo
# task, the papers' reward with its length term scaled to the task), one command: sets up .venv,
# converts the policy once, starts a Reweighter service on loopback, trains and evaluates every
# (arm, seed), writes OUT/results.json (with the pre-registered area rule's verdict per arm, its
# intervals and the pilot's power table) and plots, and stops the service. Runs resume: finished
# (arm, seed) pairs in OUT/runs are reused; rerun the same command to go on.
#   bash scripts/experiment.sh --quick --out experiments/cpu-quick-picktwo  # 1 seed x 3 steps
#   bash scripts/experiment.sh --pilot --out experiments/picktwo-pilot-lr5e-6  # GRPO, seeds 100-101
#   bash scripts/experiment.sh --pilot --out experiments/picktwo-pilot learning_rate=1.0e-5  # pilot 1
#   bash scripts/experiment.sh --out experiments/picktwo-main              # the main runs
#   bash scripts/experiment.sh --out experiments/picktwo-main --jobs 2     # two seeds side by side
#   bash scripts/experiment.sh --pickone --out experiments/pickone-6seed   # the earlier one
# Anything after the known flags goes to `python -m reweighter_research.experiment`
# (e.g. --steps 8 --seeds 0,1 max_completion_length=48).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=experiments/run
PILOT=experiments/picktwo-pilot-lr5e-6/pilot.json  # the pilot that fixed the settings (EXPERIMENTS.md)
PREREG=$(cat experiments/picktwo-pilot/PREREGISTERED 2>/dev/null || echo none)
DECIDE=(--rule area --preregistered "$PREREG")
[ -f "$PILOT" ] && DECIDE+=(--pilot "$PILOT")
CONFIG=research/configs/smollm2-picktwo.yaml
MODE=(--methods grpo,mmr,dra,darling,grpo-passk --seeds 0,1,2,3,4,5,6,7,8,9,10,11 --steps 50 --eval-prompts 27 --samples 8
      --base-eval --rule area --pilot "$PILOT" --preregistered "$PREREG" --no-dra-offline)
EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) MODE=(--methods grpo,mmr,dra,darling,grpo-passk --seeds 0 --steps 3 --eval-prompts 3 --samples 8
                   "${DECIDE[@]}" --no-dra-offline); shift ;;
    --pilot) MODE=(--methods grpo --seeds 100,101 --steps 50 --eval-prompts 9 --samples 8); shift ;;
    --pickone) CONFIG=research/configs/smollm2-pickone.yaml
               MODE=(--methods grpo,mmr-keep --seeds 0,1,2,3,4,5 --steps 40 --eval-prompts 54
                     --samples 8 --base-eval); shift ;;
    --out) OUT=$2; shift 2 ;;
    --config) CONFIG=$2; shift 2 ;;
    *) EXTRA+=("$1"); shift ;;
  esac
done
bash scripts/setup.sh dev,trainer
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
PY=.venv/bin/python
mkdir -p "$OUT"
echo "[experiment.sh] policy: $($PY -m reweighter_trainer.policy)"
PORT=$($PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
GPORT=$($PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
.venv/bin/reweighter serve --host 127.0.0.1 --http-port "$PORT" --grpc-port "$GPORT" \
  --no-compile >> "$OUT/service.log" 2>&1 &
SERVICE=$!
trap 'kill "$SERVICE" 2>/dev/null; wait "$SERVICE" 2>/dev/null || true' EXIT
echo "[experiment.sh] Reweighter service pid $SERVICE on 127.0.0.1:$PORT (log: $OUT/service.log)"
start=$(date +%s)
$PY -m reweighter_research.experiment --config "$CONFIG" --out "$OUT" \
  --url "http://127.0.0.1:$PORT" "${MODE[@]}" "${EXTRA[@]}" 2>&1 | tee -a "$OUT/experiment.log"
$PY -m reweighter_research.plots "$OUT"
echo "[experiment.sh] done in $(( $(date +%s) - start )) s: $OUT/results.json"

#!/usr/bin/env bash
# Issue 40's wordadd main runs (EXPERIMENTS.md, "wordadd: pre-registration") on a lent GPU, in
# one call after bench/gpu/gpu_experiment.sh's carry calls (.gxA to .gxC with `stash`): grpo, mmr
# and the positive control grpo-2xlr, seeds 40-51, 40 steps x 2 prompts x G = 8 at 96 tokens,
# 12 processes (one seed each, its three arms in turn) against one Reweighter service.
#   device run, carry [.gxD]:  bash bench/gpu/gpu_wordadd.sh          (timeout_s 330)
# GX_LIMIT (default 290) stops the experiment; what finished is collected and the pre-registered
# rule (decision.wordadd_decision) runs on the seeds with every arm finished. Returns
# $OUT/wordadd-main.tgz (unpack: tar xzf wordadd-main.tgz -C experiments/), gpu_experiment.log,
# service.log. A CPU dry run here (minutes): GX_PY=.venv/bin/python GX_STASH=/tmp/gx-dry
# GX_SEEDS=40,41 GX_STEPS=1 GX_EVAL=1 GX_JOBS=2 GX_DEVICE=use_cpu=true GX_EXP=/tmp/wordadd-dry \
#   bash bench/gpu/gpu_wordadd.sh
set -u
cd "$(dirname "$0")/../.."
export GX_CONFIG=research/configs/smollm2-wordadd.yaml
export GX_METHODS=grpo,mmr,grpo-2xlr
export GX_SEEDS=${GX_SEEDS:-40,41,42,43,44,45,46,47,48,49,50,51}
export GX_STEPS=${GX_STEPS:-40}
export GX_EVAL=${GX_EVAL:-16}
export GX_JOBS=${GX_JOBS:-12}
export GX_LIMIT=${GX_LIMIT:-290}
export GX_RULE=wordadd GX_PILOT=none GX_BASE_EVAL=0
export GX_EXP=${GX_EXP:-$PWD/experiments/wordadd-main}
export GX_PREREG=${GX_PREREG:-$(cat experiments/wordadd-gate/PREREGISTERED 2>/dev/null || echo none)}
exec bash bench/gpu/gpu_experiment.sh run

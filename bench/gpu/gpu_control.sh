#!/usr/bin/env bash
# picktwo's pre-registered positive control (experiments/picktwo-control/PREREGISTRATION.md,
# reweighter_research.control) on a lent GPU, in one call after bench/gpu/gpu_experiment.sh's
# carry calls (.gxA to .gxC with `stash`): grpo, grpo-2xlr, grpo-1.3xlr and mmr, seeds 300-311,
# picktwo-main's config (50 steps, 27 held-out prompts x 8 samples), 12 processes (one seed
# each, its four arms in that order) against one Reweighter service.
#   device run, carry [.gxD]:  bash bench/gpu/gpu_control.sh          (timeout_s 540)
# GX_LIMIT (default 470) stops the experiment; what finished is collected and the rule
# (control.control_decision) runs on the seeds with every arm finished. Resumable: finished runs
# in experiments/picktwo-control/runs are reused, so after unpacking $OUT/picktwo-control.tgz
# (tar xzf picktwo-control.tgz -C experiments/) and committing, the same call trains only the
# rest. The CPU dry run at toy size: python -m reweighter_research.control --dry-run OUT
set -u
cd "$(dirname "$0")/../.."
export GX_CONFIG=research/configs/smollm2-picktwo.yaml
export GX_METHODS=grpo,grpo-2xlr,grpo-1.3xlr,mmr
export GX_SEEDS=${GX_SEEDS:-300,301,302,303,304,305,306,307,308,309,310,311}
export GX_STEPS=${GX_STEPS:-50}
export GX_EVAL=${GX_EVAL:-27}
export GX_JOBS=${GX_JOBS:-12}
export GX_LIMIT=${GX_LIMIT:-470}
export GX_RULE=control GX_PILOT=none GX_BASE_EVAL=0
export GX_EXP=${GX_EXP:-$PWD/experiments/picktwo-control}
export GX_PREREG=${GX_PREREG:-$(cat experiments/picktwo-control/PREREGISTERED)}
exec bash bench/gpu/gpu_experiment.sh run

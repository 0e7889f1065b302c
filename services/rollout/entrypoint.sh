#!/usr/bin/env bash
# The rollout server: vLLM behind `trl vllm-serve`, which starts vLLM's OpenAI-compatible server
# in dev mode with the NCCL weight-transfer engine and the logprob settings TRL's GRPOTrainer
# (vllm_mode: server) expects. Configured by environment variables:
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
#   EXTRA_ARGS               anything else, passed through to `vllm serve` as-is
#
# Health: GET /health/ answers 200 once the model is loaded.
set -euo pipefail

: "${MODEL:?set MODEL to the policy model (hub id or path)}"

args=(
  --model "${MODEL}"
  --tensor_parallel_size "${TENSOR_PARALLEL_SIZE:-1}"
  --data_parallel_size "${DATA_PARALLEL_SIZE:-1}"
  --gpu_memory_utilization "${GPU_MEMORY_UTILIZATION:-0.9}"
  --host "${HOST:-0.0.0.0}"
  --port "${PORT:-8000}"
  --dtype "${DTYPE:-auto}"
  --log_level "${LOG_LEVEL:-info}"
)
if [[ -n "${MAX_MODEL_LEN:-}" ]]; then
  args+=(--max_model_len "${MAX_MODEL_LEN}")
fi
if [[ -n "${ENABLE_PREFIX_CACHING:-}" ]]; then
  args+=(--enable_prefix_caching "${ENABLE_PREFIX_CACHING}")
fi

# Word splitting of EXTRA_ARGS is intended: it is a list of flags.
# shellcheck disable=SC2086
exec trl vllm-serve "${args[@]}" ${EXTRA_ARGS:-} "$@"

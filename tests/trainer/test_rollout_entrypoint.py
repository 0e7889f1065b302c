"""services/rollout/entrypoint.sh: env vars -> the `vllm serve` command TRL 1.16 documents for
GRPOTrainer's server mode (vLLM itself cannot run here: no GPU; tests/trainer/test_rollout_cpu.py
runs the real one on CPU). A fake `vllm` on PATH prints its argv and the dev-mode variable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ENTRYPOINT = Path(__file__).resolve().parents[2] / "services" / "rollout" / "entrypoint.sh"
FAKE = (
    "import json, os, sys\n"
    "print(json.dumps([os.environ.get('VLLM_SERVER_DEV_MODE'), *sys.argv[1:]]))\n"
)


def _run(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    fake = tmp_path / "bin" / "vllm"
    fake.parent.mkdir(exist_ok=True)
    fake.write_text(f"#!{sys.executable}\n{FAKE}")
    fake.chmod(0o755)
    base = {"PATH": f"{fake.parent}:{os.environ['PATH']}"}
    return subprocess.run(
        ["bash", str(ENTRYPOINT)], env={**base, **env}, capture_output=True, text=True, timeout=30
    )


def _serve(proc: subprocess.CompletedProcess) -> list[str]:
    """The argv after `vllm`, checked to be `serve` in dev mode."""
    assert proc.returncode == 0, proc.stderr
    dev, *argv = json.loads(proc.stdout)
    assert dev == "1" and argv[0] == "serve"
    return argv


def _last(argv: list[str], flag: str) -> str:
    """The value vLLM's argparse keeps for `flag` (the last one given)."""
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag][-1]


def test_the_documented_trl_settings(tmp_path):
    """TRL 1.16 (trl.generation.vllm_client's docstring, trl.scripts.vllm_serve.build_command):
    VLLM_SERVER_DEV_MODE=1 vllm serve MODEL --weight-transfer-config '{"backend": "nccl"}'
    --logprobs-mode processed_logprobs --max-logprobs -1."""
    from trl.scripts.vllm_serve import ScriptArguments, build_command

    argv = _serve(_run(tmp_path, {"MODEL": "Qwen/Qwen2.5-0.5B-Instruct"}))
    assert argv[1] == "Qwen/Qwen2.5-0.5B-Instruct"
    assert json.loads(_last(argv, "--weight-transfer-config")) == {"backend": "nccl"}
    assert _last(argv, "--logprobs-mode") == "processed_logprobs"
    assert _last(argv, "--max-logprobs") == "-1"
    # Every flag TRL's own (deprecated) launcher sets is set here too, or left at vLLM's default.
    trl = build_command(ScriptArguments(model="m"))
    trl_flags = {a for a in trl[trl.index("serve") :] if a.startswith("--")}
    vllm_defaults = {"--kv-cache-dtype", "--model-impl"}  # TRL passes "auto", vLLM's default
    assert trl_flags - vllm_defaults <= set(argv), trl_flags - set(argv)


def test_env_becomes_vllm_serve_flags(tmp_path):
    argv = _serve(
        _run(
            tmp_path,
            {
                "MODEL": "Qwen/Qwen2.5-0.5B-Instruct",
                "TENSOR_PARALLEL_SIZE": "2",
                "GPU_MEMORY_UTILIZATION": "0.5",
                "MAX_MODEL_LEN": "4096",
                "PORT": "8123",
                "ENABLE_PREFIX_CACHING": "true",
                "EXTRA_ARGS": "--seed 7",
            },
        )
    )
    pairs = {argv[i]: argv[i + 1] for i in range(len(argv) - 1)}
    assert pairs["--tensor-parallel-size"] == "2" and pairs["--data-parallel-size"] == "1"
    assert pairs["--gpu-memory-utilization"] == "0.5" and pairs["--max-model-len"] == "4096"
    assert pairs["--host"] == "0.0.0.0" and pairs["--port"] == "8123"
    assert "--enable-prefix-caching" in argv and pairs["--seed"] == "7"


def test_prefix_caching_false_and_nonsense(tmp_path):
    argv = _serve(_run(tmp_path, {"MODEL": "m", "ENABLE_PREFIX_CACHING": "false"}))
    assert "--no-enable-prefix-caching" in argv
    proc = _run(tmp_path, {"MODEL": "m", "ENABLE_PREFIX_CACHING": "yes"})
    assert proc.returncode == 2 and "ENABLE_PREFIX_CACHING" in proc.stderr


def test_defaults_leave_max_model_len_to_vllm(tmp_path):
    argv = _serve(_run(tmp_path, {"MODEL": "m"}))
    assert "--max-model-len" not in argv and _last(argv, "--port") == "8000"


@pytest.mark.parametrize("env", [{}, {"MODEL": ""}])
def test_model_is_required(tmp_path, env):
    proc = _run(tmp_path, env)
    assert proc.returncode != 0 and "set MODEL" in proc.stderr


def test_device_cpu_is_eager_with_a_bounded_kv_cache_and_the_gloo_engine(tmp_path):
    """DEVICE=cpu (scripts/rollout-cpu.sh, the CPU image): the gloo weight-transfer engine
    (reweighter_trainer.rollout's vLLM plugin), with TRL's logprob settings kept."""
    argv = _serve(_run(tmp_path, {"MODEL": "m", "DEVICE": "cpu"}))
    assert "--enforce-eager" in argv
    flag = "--weight-transfer-config"
    configs = [json.loads(argv[i + 1]) for i, a in enumerate(argv) if a == flag]
    assert configs == [{"backend": "gloo"}]
    assert _last(argv, "--logprobs-mode") == "processed_logprobs"
    assert _last(argv, "--max-logprobs") == "-1"


def test_device_cpu_exports_the_kv_cache_space(tmp_path):
    """The default share of memory is 90 % of the RAM on CPU: the entrypoint bounds it."""
    fake = tmp_path / "bin" / "vllm"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho KV=$VLLM_CPU_KVCACHE_SPACE\n")
    fake.chmod(0o755)
    env = {"PATH": f"{fake.parent}:{os.environ['PATH']}", "MODEL": "m", "DEVICE": "cpu"}
    out = subprocess.run(["bash", str(ENTRYPOINT)], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "KV=1"
    env["VLLM_CPU_KVCACHE_SPACE"] = "3"
    out = subprocess.run(["bash", str(ENTRYPOINT)], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "KV=3"


def test_device_cpu_without_a_cxx_compiler_runs_the_sampler_eagerly(tmp_path):
    """vLLM's CPU sampler torch.compiles one function even when eager; inductor needs a C++
    compiler, which the slim CPU image lacks (the engine died on the first sampled token)."""
    fake = tmp_path / "bin" / "vllm"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho DYNAMO=$TORCHDYNAMO_DISABLE\n")
    fake.chmod(0o755)
    env = {"PATH": f"{fake.parent}:{os.environ['PATH']}", "MODEL": "m", "DEVICE": "cpu"}
    run = lambda **e: subprocess.run(  # noqa: E731
        ["bash", str(ENTRYPOINT)], env={**env, **e}, capture_output=True, text=True, timeout=30
    ).stdout.strip()
    assert run(CXX="no-such-cxx-compiler") == "DYNAMO=1"
    assert run(CXX="sh") == "DYNAMO="  # a compiler (any command) is there: compile as vLLM does
    assert run(CXX="no-such-cxx-compiler", TORCHDYNAMO_DISABLE="0") == "DYNAMO=0"  # the user's


def test_unknown_device_is_refused(tmp_path):
    proc = _run(tmp_path, {"MODEL": "m", "DEVICE": "tpu"})
    assert proc.returncode == 2 and "DEVICE must be cuda or cpu" in proc.stderr

"""services/rollout/entrypoint.sh: env vars -> `trl vllm-serve` flags that TRL's own parser
accepts and turns into the `vllm serve` command (vLLM itself cannot run here: no GPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ENTRYPOINT = Path(__file__).resolve().parents[2] / "services" / "rollout" / "entrypoint.sh"


def _run(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    fake_trl = tmp_path / "bin" / "trl"
    fake_trl.parent.mkdir(exist_ok=True)
    fake_trl.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    fake_trl.chmod(0o755)
    base = {"PATH": f"{fake_trl.parent}:{os.environ['PATH']}"}
    return subprocess.run(
        ["bash", str(ENTRYPOINT)], env={**base, **env}, capture_output=True, text=True, timeout=30
    )


def _vllm_command(argv: list[str]) -> list[str]:
    from trl.scripts.vllm_serve import build_command, make_parser

    assert argv[0] == "vllm-serve"
    (script_args, extra) = make_parser().parse_args_and_config(
        argv[1:], return_remaining_strings=True
    )
    return build_command(script_args, extra)


def test_env_becomes_trl_vllm_serve_flags(tmp_path):
    proc = _run(
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
    assert proc.returncode == 0, proc.stderr
    cmd = _vllm_command(json.loads(proc.stdout))
    serve = cmd[cmd.index("serve") :]
    pairs = {serve[i]: serve[i + 1] for i in range(len(serve) - 1)}
    assert serve[1] == "Qwen/Qwen2.5-0.5B-Instruct"
    assert pairs["--tensor-parallel-size"] == "2" and pairs["--data-parallel-size"] == "1"
    assert pairs["--gpu-memory-utilization"] == "0.5" and pairs["--max-model-len"] == "4096"
    assert pairs["--host"] == "0.0.0.0" and pairs["--port"] == "8123"
    assert "--enable-prefix-caching" in serve and pairs["--seed"] == "7"
    assert json.loads(pairs["--weight-transfer-config"]) == {"backend": "nccl"}


def test_defaults_leave_max_model_len_to_vllm(tmp_path):
    proc = _run(tmp_path, {"MODEL": "m"})
    cmd = _vllm_command(json.loads(proc.stdout))
    assert "--max-model-len" not in cmd and cmd[cmd.index("--port") + 1] == "8000"


@pytest.mark.parametrize("env", [{}, {"MODEL": ""}])
def test_model_is_required(tmp_path, env):
    proc = _run(tmp_path, env)
    assert proc.returncode != 0 and "set MODEL" in proc.stderr


def test_device_cpu_is_eager_with_a_bounded_kv_cache_and_the_gloo_engine(tmp_path):
    """DEVICE=cpu (scripts/rollout-cpu.sh, the CPU image): vLLM's argparse keeps the last
    --weight-transfer-config, so ours replaces the NCCL one TRL puts first."""
    proc = _run(tmp_path, {"MODEL": "m", "DEVICE": "cpu"})
    assert proc.returncode == 0, proc.stderr
    cmd = _vllm_command(json.loads(proc.stdout))
    assert "--enforce-eager" in cmd
    configs = [json.loads(cmd[i + 1]) for i, a in enumerate(cmd) if a == "--weight-transfer-config"]
    assert configs[-1] == {"backend": "gloo"} and configs[0] == {"backend": "nccl"}
    import argparse

    last = argparse.ArgumentParser()
    last.add_argument("--weight-transfer-config")
    known, _ = last.parse_known_args(cmd)
    assert json.loads(known.weight_transfer_config) == {"backend": "gloo"}


def test_device_cpu_exports_the_kv_cache_space(tmp_path):
    """The default share of memory is 90 % of the RAM on CPU: the entrypoint bounds it."""
    fake = tmp_path / "bin" / "trl"
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
    fake = tmp_path / "bin" / "trl"
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

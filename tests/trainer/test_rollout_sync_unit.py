"""The CPU weight sync's parts that need no vLLM: the rollout section of the config, the route
the trainer picks, the gloo wire between two real processes (trainer rank 0, a receiver rank 1)
with the bucket plan both ends compute. The real server: test_rollout_cpu.py."""

from __future__ import annotations

import json
import subprocess
import sys
import types

import pytest
import torch

from reweighter_trainer.config import ConfigError, grpo_args, load_raw, parse
from reweighter_trainer.rollout.gloo import (
    InitInfo,
    address_towards,
    open_group,
    parse_update_info,
    plan_buckets,
    send,
)
from reweighter_trainer.train import weight_sync_route

ROLLOUT = "trainer/configs/rollout-cpu.yaml"


def test_rollout_config_is_server_mode_with_gloo():
    cfg = parse(load_raw(ROLLOUT))
    args = grpo_args(cfg)
    assert args.use_vllm and args.vllm_mode == "server" and args.max_steps >= 2
    assert args.vllm_server_base_url == "http://127.0.0.1:8000"
    assert cfg.reweighter.url == "http://127.0.0.1:8080"
    assert weight_sync_route(cfg, args) == "gloo"
    auto = parse(load_raw(ROLLOUT, ["rollout.weight_sync=auto"]))
    assert weight_sync_route(auto, grpo_args(auto)) == "gloo"  # use_cpu: true, no CUDA here


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (["rollout.weight_sync=ucx"], "rollout.weight_sync"),
        (["rollout.sync_timeout_s=0"], "rollout.sync_timeout_s"),
        (["rollout.colour=red"], "rollout.colour"),
    ],
)
def test_bad_rollout_settings_are_named(overrides, named):
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        parse(load_raw(ROLLOUT, overrides))


def test_rollout_section_without_server_mode_is_refused():
    cfg = parse(load_raw(ROLLOUT, ["use_vllm=false"]))
    with pytest.raises(ConfigError, match="rollout: .*use_vllm: true and vllm_mode: server"):
        grpo_args(cfg)


def test_no_server_no_route():
    cfg = parse(load_raw("trainer/configs/smoke-cpu.yaml"))
    assert weight_sync_route(cfg, types.SimpleNamespace(use_vllm=False)) is None


def test_update_info_is_checked_field_by_field():
    with pytest.raises(ValueError, match="missing 'shapes'"):
        parse_update_info({"names": ["a"], "dtype_names": ["float32"]})
    with pytest.raises(ValueError, match="differ in length"):
        parse_update_info({"names": ["a"], "dtype_names": [], "shapes": [[1]]})
    with pytest.raises(ValueError, match="'floaty'"):
        parse_update_info({"names": ["a"], "dtype_names": ["floaty"], "shapes": [[1]]})
    with pytest.raises(ValueError, match="init_info"):
        InitInfo.from_dict({"master_port": 1})


def test_buckets_are_consecutive_one_dtype_and_bounded():
    f32, bf16 = torch.float32, torch.bfloat16
    meta = [("a", f32, (4,)), ("b", f32, (4,)), ("c", bf16, (2,)), ("d", f32, (10,)),
            ("e", f32, (1,))]  # fmt: skip
    # 16 + 16 bytes fit in 40; a dtype change cuts; 40 bytes alone; 4 more would exceed 40.
    assert plan_buckets(meta, bucket_bytes=40) == [[0, 1], [2], [3], [4]]
    assert plan_buckets(meta, bucket_bytes=1) == [[0], [1], [2], [3], [4]]


RECEIVER = """
import json, sys, torch
from reweighter_trainer.rollout.gloo import InitInfo, open_group, parse_update_info, receive
info, update_info = InitInfo.from_dict(json.loads(sys.argv[1])), json.loads(sys.argv[2])
group = open_group(info, rank=1)
got = [(n, t.clone()) for b in receive(group, parse_update_info(update_info)) for n, t in b]
torch.save(got, sys.argv[3])
"""


@pytest.mark.process
def test_gloo_wire_between_two_processes(free_port, tmp_path):
    """Rank 0 hosts the store and broadcasts; rank 1 (another process) gets every tensor, bit
    for bit, by name."""
    g = torch.Generator().manual_seed(0)
    tensors = [
        ("model.embed_tokens.weight", torch.randn(300, 64, generator=g)),
        ("model.norm.weight", torch.randn(64, generator=g)),
        ("model.layers.0.mlp.up_proj.weight", torch.randn(64, 96, generator=g).to(torch.bfloat16)),
        ("big", torch.randn(3_000_000, generator=g)),
    ]
    update_info = {
        "names": [n for n, _ in tensors],
        "dtype_names": [str(t.dtype).removeprefix("torch.") for _, t in tensors],
        "shapes": [list(t.shape) for _, t in tensors],
    }
    info = InitInfo(address_towards("http://127.0.0.1:8000"), free_port, 2, timeout_s=60)
    out = tmp_path / "got.pt"
    proc = subprocess.Popen(
        [sys.executable, "-c", RECEIVER, json.dumps(info.as_dict()), json.dumps(update_info),
         str(out)],
    )  # fmt: skip
    try:
        group = open_group(info, rank=0)
        sent = send(group, parse_update_info(update_info), iter(tensors))
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    got = torch.load(out)
    assert sent == sum(t.numel() * t.element_size() for _, t in tensors)
    assert [n for n, _ in got] == [n for n, _ in tensors]
    for (_, want), (_, have) in zip(tensors, got, strict=True):
        assert have.dtype == want.dtype and torch.equal(have, want)


def test_a_tensor_that_is_not_the_announced_one_is_refused(free_port):
    info = InitInfo("127.0.0.1", free_port, 1, timeout_s=10)
    group = open_group(info, rank=0)  # a group of one: broadcasts return at once
    meta = parse_update_info({"names": ["a"], "dtype_names": ["float32"], "shapes": [[2]]})
    with pytest.raises(ValueError, match="does not match the announced a"):
        send(group, meta, iter([("a", torch.zeros(3))]))

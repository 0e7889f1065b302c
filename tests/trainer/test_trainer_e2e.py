"""End to end: reweighter-train against a live service (HTTP, gRPC), two processes, server mode.

Each run writes an audit trail (reweighter.trace_dir): every process's slice of each batch with
the rewards it handed TRL, and every request/result at the backend boundary on the main process.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from reweighter.client import GrpcReweighterClient, ReweighterClient
from reweighter.types import Group, ReweightRequest
from reweighter_trainer.data import load_arith_rows
from reweighter_trainer.rewards import accuracy_reward, format_reward

pytestmark = pytest.mark.trainer  # reweighter-train runs
ANSWERS = {r["prompt"]: r["answer"] for r in load_arith_rows()}


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _check_run(out: Path, client, steps: int, group_size: int) -> None:
    trace = out / "trace"
    requests = _jsonl(trace / "requests.jsonl")
    slices = _jsonl(trace / "slices.rank0.jsonl")
    history = [h for h in json.loads((out / "log_history.json").read_text()) if "reward" in h]
    assert len(requests) == len(slices) == len(history) == steps

    for req, sl, logged in zip(requests, slices, history, strict=True):
        groups = req["groups"]
        assert all(len(g["completions"]) == group_size for g in groups)
        # base rewards: recomputed here from the completions and the gold answers
        answers = [ANSWERS[p] for p in sl["prompts"]]
        acc = accuracy_reward(sl["prompts"], sl["completions"], answer=answers)
        fmt = format_reward(sl["prompts"], sl["completions"])
        base = [a + 0.2 * f for a, f in zip(acc, fmt, strict=True)]
        assert [r for g in groups for r in g["rewards"]] == pytest.approx(base, abs=1e-6)
        # what TRL got == what the service returned, group by group
        returned = [r for g in groups for r in g["result_rewards"]]
        assert sl["rewards"] == pytest.approx(returned, abs=1e-7)
        # ...and what TRL trained on: its logged mean reward for that step
        assert logged["reward"] == pytest.approx(sum(returned) / len(returned), abs=1e-5)
        # the service answers the same groups the same way when asked again
        again = client.reweight(
            ReweightRequest(
                groups=[Group(rewards=g["rewards"], completions=g["completions"]) for g in groups],
                method=req["method"],
                params=req["params"],
            )
        )
        assert [r for g in again.groups for r in g.rewards] == pytest.approx(returned, abs=1e-5)
    # the reweighting is not a no-op: some group with reward spread was reshaped
    changed = [
        g
        for r in requests
        for g in r["groups"]
        if max(g["rewards"]) > min(g["rewards"]) and g["result_rewards"] != g["rewards"]
    ]
    assert changed


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_smoke_run_against_live_service(reweighter_service, run_cli, tmp_path, transport):
    out = tmp_path / "out"
    if transport == "http":
        target = [f"reweighter.url={reweighter_service.http_url}"]
        client = ReweighterClient(reweighter_service.http_url)
    else:
        target = [f"reweighter.url=grpc://{reweighter_service.grpc_target}"]
        client = GrpcReweighterClient(reweighter_service.grpc_target)
    proc = run_cli([*target, f"output_dir={out}", f"reweighter.trace_dir={out}/trace"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "reweighter_summary.json").read_text())
    assert summary["steps"] == 3 and summary["calls"] == 3 and summary["backend"] == transport
    with client:
        _check_run(out, client, steps=3, group_size=4)
    print(f"\n{transport} smoke summary: {json.dumps(summary)}")


def test_two_processes_reweight_whole_groups(reweighter_service, run_cli, tmp_path):
    """per-device batch 3, groups of 2: the middle group of each step straddles the ranks."""
    out = tmp_path / "out"
    launcher = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--main_process_port",
        "0",
        "-m",
        "reweighter_trainer.cli",
    ]
    proc = run_cli(
        [
            f"reweighter.url={reweighter_service.http_url}",
            f"output_dir={out}",
            f"reweighter.trace_dir={out}/trace",
            "per_device_train_batch_size=3",
            "num_generations=2",
            "max_steps=2",
        ],
        launcher=launcher,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    trace = out / "trace"
    requests = _jsonl(trace / "requests.jsonl")
    ranks = [_jsonl(trace / f"slices.rank{r}.jsonl") for r in (0, 1)]
    assert len(requests) == 2 and all(len(r) == 2 for r in ranks)  # one call per step

    split = 0
    for step, req in enumerate(requests):
        s0, s1 = ranks[0][step], ranks[1][step]
        assert len(s0["prompts"]) == len(s1["prompts"]) == 3
        owner = [0] * 3 + [1] * 3
        prompts = s0["prompts"] + s1["prompts"]
        completions = s0["completions"] + s1["completions"]
        assert len(req["groups"]) == 3
        for k, group in enumerate(req["groups"]):
            assert len(group["completions"]) == 2  # exactly num_generations...
            rows = range(2 * k, 2 * k + 2)
            assert group["completions"] == [completions[i] for i in rows]
            assert len({prompts[i] for i in rows}) == 1  # ...of one prompt
            split += len({owner[i] for i in rows}) == 2
        # each rank got back its own part of the service's answer
        returned = [r for g in req["groups"] for r in g["result_rewards"]]
        assert s0["rewards"] == pytest.approx(returned[:3], abs=1e-7)
        assert s1["rewards"] == pytest.approx(returned[3:], abs=1e-7)
    assert split == 2  # one straddling group per step: the case the gather exists for
    assert not (trace / "requests.rank1.jsonl").exists()


def test_server_mode_against_fake_vllm_serve(reweighter_service, fake_vllm, tmp_path, monkeypatch):
    import httpx
    import trl_cpu_weight_sync as shim

    from reweighter_trainer.config import load_raw, parse
    from reweighter_trainer.train import run

    shim.install(monkeypatch)
    out = tmp_path / "out"
    cfg = parse(
        load_raw(
            "trainer/configs/smoke-cpu.yaml",
            [
                f"reweighter.url={reweighter_service.http_url}",
                f"output_dir={out}",
                f"reweighter.trace_dir={out}/trace",
                "use_vllm=true",
                "vllm_mode=server",
                f"vllm_server_base_url={fake_vllm}",
                # TRL's NCCL route (a GPU's default), faked by the shim: on CPU "auto" is gloo
                "rollout.weight_sync=nccl",
                "max_steps=2",
            ],
        )
    )
    summary = run(cfg)
    assert summary["steps"] == 2

    calls = httpx.get(f"{fake_vllm}/fake/calls").json()
    gens = [c["body"] for c in calls if c["path"] == "/v1/completions"]
    assert len(gens) == 2
    for body in gens:  # 8 completions per step = 2 prompts x n=4, as token ids
        assert body["n"] == 4 and len(body["prompt"]) == 2 and body["max_tokens"] == 24
        assert all(isinstance(t, int) for t in body["prompt"][0])
    paths = [c["path"] for c in calls]
    assert paths.count("/init_weight_transfer_engine") == 1
    assert paths.count("/update_weights") == paths.count("/reset_prefix_cache") == 2
    # the trainer announced, then streamed, every parameter
    from transformers import AutoModelForCausalLM

    from reweighter_trainer.tiny_model import tiny_model_path

    names = [
        n for n, _ in AutoModelForCausalLM.from_pretrained(tiny_model_path()).named_parameters()
    ]
    announced = [c["body"]["update_info"]["names"] for c in calls if c["path"] == "/update_weights"]
    assert announced == [names, names]
    assert [[n for n, _ in b] for b in shim.BROADCASTS] == [names, names]

    with ReweighterClient(reweighter_service.http_url) as client:
        _check_run(out, client, steps=2, group_size=4)
    history = json.loads((out / "log_history.json").read_text())
    # before the first update the fake's weights are the trainer's: its sampling logprobs must
    # match what the trainer recomputes for the same tokens (same ids, same order)
    assert history[0]["sampling/sampling_logp_difference/mean"] < 1e-3

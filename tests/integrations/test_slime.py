"""slime adapter against a live service.

slime is not on PyPI and does not import without Megatron/SGLang, so `Sample` below is a DOUBLE:
a dataclass with exactly the fields of `slime.utils.types.Sample` at THUDM/slime commit 624b824
(2026-08-21) and its `get_reward_value(args)`. The hook signature `f(args, samples) ->
(raw_rewards, rewards)` is the one `RolloutManager._post_process_rewards` calls at that commit.
"""

from __future__ import annotations

import importlib
import random
from dataclasses import dataclass, field
from enum import Enum
from types import SimpleNamespace
from typing import Any

import pytest

from reweighter.client import ReweighterClient
from reweighter.integrations import slime
from reweighter.types import Group, ReweightRequest


@dataclass
class Sample:
    """Double of slime.utils.types.Sample (fields and get_reward_value only)."""

    group_index: int | None = None
    index: int | None = None
    rollout_id: int | None = None
    prompt: str | list[dict[str, str]] = ""
    tokens: list[int] = field(default_factory=list)
    multimodal_inputs: dict[str, Any] | None = None
    multimodal_train_inputs: dict[str, Any] | None = None
    multimodal_train_input_id: str | None = None
    apply_chat_template_kwargs: dict = field(default_factory=dict)
    response: str = ""
    response_length: int = 0
    label: str | None = None
    reward: float | dict[str, Any] | None = None
    loss_mask: list[int] | None = None
    weight_versions: list[str] = field(default_factory=list)
    rollout_log_probs: list[float] | None = None
    rollout_top_p_token_ids: list[int] | None = None
    rollout_top_p_token_offsets: list[int] | None = None
    rollout_routed_experts: list[list[int]] | None = None
    remove_sample: bool = False
    teacher_log_probs: list[float] | None = None

    class Status(Enum):
        PENDING = "pending"
        COMPLETED = "completed"
        TRUNCATED = "truncated"
        ABORTED = "aborted"
        FAILED = "failed"

    status: Status = Status.PENDING
    metadata: dict = field(default_factory=dict)
    generate_function_path: str | None = None
    custom_rm_path: str | None = None
    train_metadata: dict | None = None
    session_id: str | None = None
    non_generation_time: float = 0.0

    def get_reward_value(self, args: Any) -> float:
        return self.reward if not args.reward_key else self.reward[args.reward_key]


ANSWERS = [
    "Add the two numbers: 17 + 25 = 42.",
    "17 + 25 is 42.",
    "Count up from 25 by 17 to reach 42.",
    "The answer is 41.",
    "First 20 + 25 = 45, then subtract 3: 42.",
    "I think 42.",
]


def make_batch(prompts: int = 4, n: int = 6, seed: int = 0) -> list[Sample]:
    rng = random.Random(seed)
    batch = []
    for g in range(prompts):
        for k in range(n):
            text = f"prompt {g}: " + ANSWERS[(g + k) % len(ANSWERS)]
            batch.append(
                Sample(group_index=g, index=g * n + k, prompt=f"q{g}", response=text,
                       reward=float(rng.random() < 0.6))
            )
    return batch


def args(**kw: Any) -> SimpleNamespace:
    base = {"reward_key": None, "advantage_estimator": "grpo", "rewards_normalization": False,
            "grpo_std_normalization": False}
    base.update(kw)
    return SimpleNamespace(**base)


def in_group(batch: list[Sample], g: int) -> list[Sample]:
    """A group's members in the documented member order (Sample.index)."""
    return sorted((s for s in batch if s.group_index == g), key=lambda s: s.index)


def expected(http: ReweighterClient, batch: list[Sample], advantages: str) -> list[float]:
    """/v1/reweight on the groups, members in Sample.index order."""
    groups = sorted({s.group_index for s in batch})
    req = ReweightRequest(
        groups=[Group(rewards=[s.reward for s in in_group(batch, g)],
                      completions=[s.response for s in in_group(batch, g)])
                for g in groups],
        advantages=advantages,  # type: ignore[arg-type]
    )
    res = http.reweight(req)
    by_sample: dict[int, float] = {}
    for g, gr in zip(groups, res.groups, strict=True):
        vals = gr.advantages if advantages != "none" else gr.rewards
        for s, v in zip(in_group(batch, g), vals, strict=True):
            by_sample[s.index] = v
    return [by_sample[s.index] for s in batch]


@pytest.mark.parametrize(
    ("kw", "kind"),
    [
        ({}, "none"),
        ({"rewards_normalization": True}, "dr_grpo"),
        ({"rewards_normalization": True, "grpo_std_normalization": True}, "grpo"),
        ({"advantage_estimator": "ppo", "rewards_normalization": True}, "none"),
    ],
)
def test_hook_equals_reweight_per_group(http: ReweighterClient, kw: dict, kind: str) -> None:
    a = args(**kw)
    assert slime.advantage_kind(a) == kind
    batch = make_batch()
    random.Random(1).shuffle(batch)  # slime's batch order must not matter
    hook = slime.make_post_process(http)
    raw, rewards = hook(a, batch)
    assert raw == [s.reward for s in batch]
    assert len(rewards) == len(batch)
    assert rewards == pytest.approx(expected(http, batch, kind), abs=1e-6)
    if kind == "none":
        assert rewards != pytest.approx(raw, abs=1e-6)  # reweighting changed something


def test_loaded_by_path_from_environment(service, monkeypatch: pytest.MonkeyPatch) -> None:
    # slime's load_function imports "module.attr"; do the same with the documented path.
    monkeypatch.setenv("REWEIGHTER_URL", service.http_url)
    monkeypatch.setenv("REWEIGHTER_METHOD", "mmr")
    monkeypatch.setenv("REWEIGHTER_PARAMS", '{"lambda": 0.5}')
    slime._default_hook.cache_clear()
    path = "reweighter.integrations.slime.post_process_rewards"
    module, _, attr = path.rpartition(".")
    hook = getattr(importlib.import_module(module), attr)
    batch = make_batch(prompts=2, n=4)
    raw, rewards = hook(args(), batch)
    with ReweighterClient(service.http_url) as c:
        want = c.reweight(ReweightRequest(
            groups=[Group(rewards=[s.reward for s in batch if s.group_index == g],
                          completions=[s.response for s in batch if s.group_index == g])
                    for g in (0, 1)],
            method="mmr", params={"lambda": 0.5}))
    assert rewards == pytest.approx(want.groups[0].rewards + want.groups[1].rewards, abs=1e-6)
    slime._default_hook.cache_clear()


def test_dict_rewards_and_ungrouped_samples(http: ReweighterClient) -> None:
    batch = make_batch(prompts=1, n=4)
    for s in batch:
        s.reward = {"acc": s.reward, "fmt": 0.5}
    loner = Sample(group_index=None, response="alone", reward={"acc": 0.7, "fmt": 0.0})
    raw, rewards = slime.make_post_process(http)(args(reward_key="acc"), [*batch, loner])
    assert raw[-1] == 0.7
    assert rewards[-1] == pytest.approx(0.7, abs=1e-6)  # a group of one keeps its reward
    with pytest.raises(TypeError, match="reward-key"):
        slime.make_post_process(http)(args(), batch)


def test_empty_batch(http: ReweighterClient) -> None:
    assert slime.make_post_process(http)(args(), []) == ([], [])


def test_member_order_is_sample_index(http: ReweighterClient) -> None:
    """Issue 21 item 5: whatever order slime's batch is in, each group goes to the service in
    Sample.index order: the same request, the same reward per sample."""
    sent: list[ReweightRequest] = []

    class Recording:
        def reweight(self, request: ReweightRequest):  # noqa: ANN202
            sent.append(request)
            return http.reweight(request)

    per_sample = []
    for seed in (3, 4):
        batch = make_batch(prompts=3, n=4, seed=9)
        random.Random(seed).shuffle(batch)
        raw, rewards = slime.make_post_process(Recording(), method="mmr",
                                               params={"lambda": 0.5})(args(), batch)
        per_sample.append({s.index: r for s, r in zip(batch, rewards, strict=True)})
    assert per_sample[0] == per_sample[1]
    texts = [sorted(list(g.completions) for g in r.groups) for r in sent]
    assert texts[0] == texts[1]
    batch = make_batch(prompts=3, n=4, seed=9)
    for group in sent[0].groups:
        g = next(s.group_index for s in batch if s.response == group.completions[0])
        assert list(group.completions) == [s.response for s in in_group(batch, g)]

"""SkyRL adapter against a live service, with the real SkyRL types and trainer.

Real package, no doubles: `TrajectoryID`, `GeneratorOutput`, `RayPPOTrainer` and
`FullyAsyncRayPPOTrainer` come from `skyrl` 0.4.0, SkyRL's current package (installed with
--no-deps --ignore-requires-python: it declares Python 3.12, but the modules used here import
on 3.11 with the pins in scripts/stacks-requirements.txt and pyproject's `stacks` extra).
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from reweighter.client import ReweighterClient
from reweighter.integrations.skyrl import ReweighterPostprocessMixin, reweight_generator_output
from reweighter.types import Group, ReweightRequest

from . import skyrl_py311

pytest.importorskip("skyrl.train")
skyrl_py311.load()  # SkyRL's modules, with the one Python 3.12 piece they need (see it)
base = pytest.importorskip("skyrl.train.generators.base")
GeneratorOutput = base.GeneratorOutput
TrajectoryID = base.TrajectoryID

TEXTS = [
    "so x = 4 because 2x = 8",
    "dividing both sides by two gives four",
    "x equals 4",
    "guess and check: x = 3 fails, x = 4 works",
    "x = 5",
]


def make_output(tokenizer: Any, prompts: int = 3, n: int = 5, seed: int = 0) -> GeneratorOutput:
    rng = random.Random(seed)
    entries = [(p, r) for p in range(prompts) for r in range(n)]
    rng.shuffle(entries)  # arrival order differs from group order
    texts = [f"problem {p}: {TEXTS[(p + r) % len(TEXTS)]}" for p, r in entries]
    ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    return GeneratorOutput(
        prompt_token_ids=[[101] for _ in entries],
        response_ids=ids,
        rewards=[float(rng.random() < 0.5) for _ in entries],
        loss_masks=[[1] * len(i) for i in ids],
        stop_reasons=["stop"] * len(entries),
        rollout_metrics={"generate/avg_len": 7.0},
        rollout_logprobs=None,
        trajectory_ids=[TrajectoryID(instance_id=f"uid-{p}", repetition_id=r) for p, r in entries],
        trajectory_generation_times=None,
        trajectory_time_splits=None,
        rollout_expert_indices=None,
        rollout_sample_support=None,
        is_last_step=None,
        env_metrics=None,
        pixel_values=None,
        image_grid_thw=None,
    )


def expected(http: ReweighterClient, out: GeneratorOutput, tokenizer: Any) -> list[float]:
    keys = [t.instance_id for t in out["trajectory_ids"]]
    order = list(dict.fromkeys(keys))
    texts = [tokenizer.decode(i, skip_special_tokens=True) for i in out["response_ids"]]
    res = http.reweight(ReweightRequest(groups=[
        Group(rewards=[r for r, k in zip(out["rewards"], keys, strict=True) if k == g],
              completions=[t for t, k in zip(texts, keys, strict=True) if k == g])
        for g in order
    ]))
    got: list[float] = [0.0] * len(keys)
    for g, gr in zip(order, res.groups, strict=True):
        idx = [i for i, k in enumerate(keys) if k == g]
        for i, r in zip(idx, gr.rewards, strict=True):
            got[i] = r
    return got


def test_rewards_reweighted_per_instance(http: ReweighterClient, tokenizer: Any) -> None:
    out = make_output(tokenizer)
    decode = lambda ids: tokenizer.decode(ids, skip_special_tokens=True)  # noqa: E731
    new = reweight_generator_output(out, http, decode)
    assert new["rewards"] == pytest.approx(expected(http, out, tokenizer), abs=1e-6)
    assert new["rewards"] != pytest.approx(out["rewards"], abs=1e-6)
    assert new["response_ids"] is out["response_ids"]  # everything else passes through
    m = new["rollout_metrics"]
    assert m["generate/avg_len"] == 7.0
    assert m["reweighter/raw_reward_mean"] == pytest.approx(sum(out["rewards"]) / 15)
    assert 0.0 < m["reweighter/mean_similarity"] <= 1.0


def test_step_wise_only_last_steps(http: ReweighterClient, tokenizer: Any) -> None:
    out = make_output(tokenizer, prompts=2, n=3)
    last = [i % 3 != 0 for i in range(6)]
    out["is_last_step"] = last
    decode = lambda ids: tokenizer.decode(ids, skip_special_tokens=True)  # noqa: E731
    new = reweight_generator_output(out, http, decode)
    for i in range(6):
        if not last[i]:
            assert new["rewards"][i] == out["rewards"][i]
    picked = [i for i in range(6) if last[i]]
    sub = {k: ([v[i] for i in picked] if isinstance(v, list) else v) for k, v in out.items()}
    sub["is_last_step"] = None
    want = expected(http, sub, tokenizer)
    assert [new["rewards"][i] for i in picked] == pytest.approx(want, abs=1e-6)


def test_bad_outputs_name_the_field(http: ReweighterClient, tokenizer: Any) -> None:
    out = make_output(tokenizer, prompts=1, n=2)
    with pytest.raises(ValueError, match="trajectory_ids"):
        reweight_generator_output({**out, "trajectory_ids": None}, http, str)
    with pytest.raises(ValueError, match="rewards: token-level"):
        reweight_generator_output({**out, "rewards": [[0.0, 1.0], [1.0]]}, http, str)


def test_quality_goes_with_the_groups(http: ReweighterClient, tokenizer: Any) -> None:
    """A generator that adds a `quality` entry (the verifier's correctness part of each
    reward): the groups carry it, so the answer is the service's for (rewards, quality)."""
    out = make_output(tokenizer, prompts=2, n=4)
    quality = [r - 0.25 for r in out["rewards"]]  # the rest: a format term 0.25 each
    out["quality"] = quality
    decode = lambda ids: tokenizer.decode(ids, skip_special_tokens=True)  # noqa: E731
    new = reweight_generator_output(out, http, decode)
    keys = [t.instance_id for t in out["trajectory_ids"]]
    order = list(dict.fromkeys(keys))
    reps = [t.repetition_id for t in out["trajectory_ids"]]
    want = [0.0] * len(keys)
    for g in order:
        idx = sorted((i for i, k in enumerate(keys) if k == g), key=lambda i: reps[i])
        res = http.reweight(ReweightRequest(groups=[Group(
            rewards=[out["rewards"][i] for i in idx], quality=[quality[i] for i in idx],
            completions=[decode(out["response_ids"][i]) for i in idx])]))  # fmt: skip
        for i, r in zip(idx, res.groups[0].rewards, strict=True):
            want[i] = r
    assert new["rewards"] == pytest.approx(want, abs=1e-6)
    without = reweight_generator_output({**out, "quality": None}, http, decode)
    assert new["rewards"] != pytest.approx(without["rewards"], abs=1e-6)
    with pytest.raises(ValueError, match="quality: 1 given for 8 responses"):
        reweight_generator_output(out, http, decode, quality=[1.0])


def bare_trainer(cls: type, tokenizer: Any, step_wise: bool = False) -> Any:
    """A SkyRL trainer made without __init__ (which starts Ray workers), with SkyRL's own typed
    config: its postprocess_generator_output reads only cfg, tokenizer and all_metrics."""
    from skyrl.train.config import SkyRLTrainConfig

    trainer = object.__new__(cls)
    trainer.cfg = SkyRLTrainConfig.from_cli_overrides({
        "generator.n_samples_per_prompt": 5,
        "generator.step_wise_trajectories": step_wise,
        "trainer.algorithm.zero_variance_filter": False,
    })  # fmt: skip
    trainer.tokenizer = tokenizer
    trainer.all_metrics = {}
    return trainer


def test_mixin_on_the_real_trainer(service, tokenizer: Any, http) -> None:
    """The mixin over SkyRL's own RayPPOTrainer.postprocess_generator_output (per-token
    rewards, pass@n metrics), which returns (output, uids) since skyrl 0.4."""
    from skyrl.train.trainer import RayPPOTrainer

    class Trainer(ReweighterPostprocessMixin, RayPPOTrainer):
        reweighter_url = service.http_url

    trainer = bare_trainer(Trainer, tokenizer)
    out = make_output(tokenizer)
    want = expected(http, out, tokenizer)
    uids = [t.instance_id for t in out["trajectory_ids"]]
    got, got_uids = trainer.postprocess_generator_output(out, uids)
    assert got_uids == uids
    assert got["rollout_metrics"] == {"generate/avg_len": 7.0}  # ours went to all_metrics
    assert [row[-1] for row in got["rewards"]] == pytest.approx(want, abs=1e-6)
    assert all(sum(row[:-1]) == 0.0 for row in got["rewards"])
    assert len(got["rewards"][0]) == len(out["response_ids"][0])
    assert "reward/avg_pass_at_5" in trainer.all_metrics


@pytest.mark.parametrize("step_wise", [False, True])
def test_skyrl_metrics_stay_raw_and_ours_go_beside(
    service, tokenizer: Any, step_wise: bool
) -> None:
    """Issue 21 item 6: SkyRL's own reward/* metrics are what plain RayPPOTrainer reports for
    the same raw output (not the reweighted mean): SkyRL computes them itself, over the raw
    output the mixin hands it as `metrics_generator_output`; reweighter/* sit beside them in
    all_metrics (SkyRL copied rollout_metrics into all_metrics before this hook runs)."""
    import copy

    from skyrl.train.trainer import RayPPOTrainer

    class Trainer(ReweighterPostprocessMixin, RayPPOTrainer):
        reweighter_url = service.http_url

    out = make_output(tokenizer, seed=5)
    if step_wise:
        out["is_last_step"] = [i % 3 != 0 for i in range(len(out["rewards"]))]
    uids = [t.instance_id for t in out["trajectory_ids"]]
    plain = bare_trainer(RayPPOTrainer, tokenizer, step_wise)
    plain.postprocess_generator_output(copy.deepcopy(out), uids)
    ours = bare_trainer(Trainer, tokenizer, step_wise)
    got, _ = ours.postprocess_generator_output(copy.deepcopy(out), uids)

    raw_keys = {k for k in plain.all_metrics if k.startswith("reward/")}
    assert raw_keys == {"reward/avg_pass_at_5", "reward/avg_raw_reward",
                        "reward/mean_positive_reward"}
    for k in raw_keys:
        assert ours.all_metrics[k] == pytest.approx(plain.all_metrics[k], abs=1e-12), k
    last = [i for i in range(len(out["rewards"])) if not step_wise or out["is_last_step"][i]]
    trained = [got["rewards"][i][-1] for i in last]
    raw_mean = sum(out["rewards"][i] for i in last) / len(last)
    assert ours.all_metrics["reward/avg_raw_reward"] == pytest.approx(raw_mean)
    assert ours.all_metrics["reweighter/raw_reward_mean"] == pytest.approx(raw_mean)
    assert ours.all_metrics["reweighter/reward_mean"] == pytest.approx(sum(trained) / len(last))
    assert abs(ours.all_metrics["reweighter/reward_mean"] - raw_mean) > 1e-3  # they differ
    assert 0.0 < ours.all_metrics["reweighter/mean_similarity"] <= 1.0


def test_member_order_is_repetition_id(http: ReweighterClient, tokenizer: Any) -> None:
    """Issue 21 item 5: a group's members go in repetition_id order, so two arrival orders send
    the same request and get the same rewards per trajectory."""
    requests: list[ReweightRequest] = []

    class Recording:
        def reweight(self, request: ReweightRequest):  # noqa: ANN202
            requests.append(request)
            return http.reweight(request)

    decode = lambda ids: tokenizer.decode(ids, skip_special_tokens=True)  # noqa: E731
    base = make_output(tokenizer, seed=1)
    by_traj = []
    for seed in (1, 2):  # the same trajectories, arriving in two orders
        perm = list(range(len(base["rewards"])))
        random.Random(seed).shuffle(perm)
        out = {k: [v[i] for i in perm] if isinstance(v, list) else v for k, v in base.items()}
        new = reweight_generator_output(out, Recording(), decode, method="mmr",
                                        params={"lambda": 0.5})
        by_traj.append({t.to_string(): r for t, r in
                        zip(out["trajectory_ids"], new["rewards"], strict=True)})
    assert by_traj[0] == by_traj[1]
    first, second = ({g.id: list(g.completions) for g in r.groups} for r in requests)
    assert first == second  # the same groups, members in the same order
    rep = {(t.instance_id, decode(ids)): t.repetition_id
           for t, ids in zip(base["trajectory_ids"], base["response_ids"], strict=True)}
    for gid, texts in first.items():
        assert [rep[(gid, t)] for t in texts] == [0, 1, 2, 3, 4]


def test_fully_async_metrics_output_is_passed_through(service, tokenizer: Any) -> None:
    """FullyAsyncRayPPOTrainer (sample_full_batch) calls the hook with
    `metrics_generator_output` / `metrics_uids`: the kept groups plus the dropped ones, for
    metrics only. The mixin hands those to SkyRL unchanged, so SkyRL's reward/* metrics are
    those of plain FullyAsyncRayPPOTrainer over the same superset, while only the kept output
    is reweighted and trained on."""
    import copy

    from skyrl.train.fully_async_trainer import FullyAsyncRayPPOTrainer

    class Trainer(ReweighterPostprocessMixin, FullyAsyncRayPPOTrainer):
        reweighter_url = service.http_url

    kept = make_output(tokenizer, prompts=2, seed=7)
    dropped = make_output(tokenizer, prompts=3, seed=8)  # uid-0..2: rename to stay apart
    for t in dropped["trajectory_ids"]:
        t.instance_id = "dropped-" + t.instance_id
    superset = {k: (v + dropped[k] if isinstance(v, list) else v) for k, v in kept.items()}
    uids = [t.instance_id for t in kept["trajectory_ids"]]
    all_uids = [t.instance_id for t in superset["trajectory_ids"]]
    kwargs = {"metrics_generator_output": superset, "metrics_uids": all_uids}

    plain = bare_trainer(FullyAsyncRayPPOTrainer, tokenizer)
    plain.postprocess_generator_output(copy.deepcopy(kept), uids, **copy.deepcopy(kwargs))
    ours = bare_trainer(Trainer, tokenizer)
    got, got_uids = ours.postprocess_generator_output(copy.deepcopy(kept), uids, **kwargs)

    assert got_uids == uids and len(got["rewards"]) == len(kept["rewards"])
    for k in ("reward/avg_pass_at_5", "reward/avg_raw_reward", "reward/mean_positive_reward"):
        assert ours.all_metrics[k] == pytest.approx(plain.all_metrics[k], abs=1e-12), k
    raw_superset = sum(superset["rewards"]) / len(superset["rewards"])
    assert ours.all_metrics["reward/avg_raw_reward"] == pytest.approx(raw_superset)
    raw_kept = sum(kept["rewards"]) / len(kept["rewards"])
    assert ours.all_metrics["reweighter/raw_reward_mean"] == pytest.approx(raw_kept)
    assert [row[-1] for row in got["rewards"]] != pytest.approx(kept["rewards"], abs=1e-6)

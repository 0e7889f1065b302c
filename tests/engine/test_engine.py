"""ReweightEngine: fields named in errors, hand-computed results, ragged batches, real model."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest

from reweighter.config import Settings
from reweighter.engine import ReweightEngine
from reweighter.errors import (
    ConnectionFailed,
    InvalidInput,
    LimitExceeded,
    NotReady,
    Overloaded,
    ReweighterError,
    error_from,
)
from reweighter.types import AdvantageKind, Group, LongTextPolicy, Method, ReweightRequest


@pytest.fixture
def bare() -> ReweightEngine:
    """An engine that never loaded a model: embeddings-only requests must still work."""
    return ReweightEngine(Settings())


@pytest.fixture
def limited() -> ReweightEngine:
    return ReweightEngine(Settings(max_groups=4, max_group_size=5, max_completions=8, max_chars=50))


E = [[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]]  # two identical, one orthogonal


def test_dra_on_given_embeddings_by_hand(bare: ReweightEngine) -> None:
    res = bare.reweight(
        ReweightRequest(groups=[Group(rewards=[1, 1, 1], embeddings=E, id="g")], method="dra")
    )
    assert res.model is None and not bare.ready  # no model was needed, none was loaded
    g = res.groups[0]
    # row sums of similarity (s_ii = 1): 1+1+0 = 2, 2, 1 -> rewards 1/2, 1/2, 1
    assert g.rewards == pytest.approx([1 / (2 + 1e-6), 1 / (2 + 1e-6), 1 / (1 + 1e-6)], abs=1e-6)
    # distinct pairs: (1,2)=1, (1,3)=0, (2,3)=0 -> mean 1/3
    assert g.stats.mean_similarity == pytest.approx(1 / 3, abs=1e-6)
    assert g.stats.lambda_ is None and g.advantages is None and g.id == "g"


def test_grpo_advantages_of_reweighted_rewards_by_hand(bare: ReweightEngine) -> None:
    res = bare.reweight(
        ReweightRequest(groups=[Group(rewards=[1, 1, 1], embeddings=E)], advantages="grpo")
    )
    # reweighted r = [1/2, 1/2, 1]; mean 2/3; sample std = sqrt((1/36 + 1/36 + 1/9) / 2)
    std = math.sqrt((1 / 36 + 1 / 36 + 1 / 9) / 2)
    want = [(x - 2 / 3) / (std + 1e-4) for x in (0.5, 0.5, 1.0)]
    assert res.groups[0].advantages == pytest.approx(want, abs=1e-4)


def test_mmr_reports_lambda(bare: ReweightEngine) -> None:
    res = bare.reweight(
        ReweightRequest(
            groups=[Group(rewards=[1, 0, 1], embeddings=E)], method="mmr", params={"lambda": 0.5}
        )
    )
    g = res.groups[0]
    assert g.stats.lambda_ == pytest.approx(0.5)
    # first pick: items 0 and 2 tie at 1; item 2 is the less like its group (off-diagonal row
    # sum 0 against 1) and keeps 1.0 (ties go by content, never by position).
    # step 2: item0 0.5*1 - 0.5*max(0, 0) = 0.5; item1 0.5*0 - 0.5*0 = 0 -> item0 = 0.5
    # step 3: item1 -0.5 (max sim to {2,0} is 1)
    assert g.rewards == pytest.approx([0.5, -0.5, 1.0], abs=1e-6)


def test_ragged_batch_equals_groups_one_at_a_time(bare: ReweightEngine) -> None:
    rng = np.random.default_rng(0)
    groups = [
        Group(rewards=rng.random(n).tolist(), embeddings=rng.normal(size=(n, 6)).tolist())
        for n in (1, 3, 5, 2)
    ]
    for method, params in (("dra", {}), ("mmr", {}), ("none", {})):
        together = bare.reweight(
            ReweightRequest(groups=groups, method=method, params=params, advantages="grpo")
        )
        for g, got in zip(groups, together.groups, strict=True):
            alone = bare.reweight(
                ReweightRequest(groups=[g], method=method, params=params, advantages="grpo")
            ).groups[0]
            assert got.rewards == pytest.approx(alone.rewards, abs=1e-6)
            assert got.advantages == pytest.approx(alone.advantages, abs=1e-5)
            assert got.stats.mean_similarity == pytest.approx(alone.stats.mean_similarity)


def test_groups_of_different_dimensions_in_one_request(bare: ReweightEngine) -> None:
    res = bare.reweight(
        ReweightRequest(
            groups=[
                Group(rewards=[1, 1, 1], embeddings=E),
                Group(rewards=[2, 2], embeddings=[[1, 2, 3], [1, 2, 3]]),
            ],
        )
    )
    assert res.groups[1].rewards == pytest.approx([2 / (2 + 1e-6)] * 2, abs=1e-6)


@pytest.mark.parametrize(
    ("group", "field"),
    [
        (Group(rewards=[]), "groups[0].rewards"),
        (Group(rewards=[1.0, float("nan")], embeddings=[[1, 0], [0, 1]]), "groups[0].rewards[1]"),
        (Group(rewards=[1.0, float("inf")], embeddings=[[1, 0], [0, 1]]), "groups[0].rewards[1]"),
        (Group(rewards=[1.0, "x"], embeddings=[[1, 0], [0, 1]]), "groups[0].rewards[1]"),  # type: ignore[list-item]
        (Group(rewards=[1.0, 1.0]), "groups[0]"),
        (Group(rewards=[1.0], completions=["a"], embeddings=[[1.0]]), "groups[0]"),
        (Group(rewards=[1.0, 1.0], completions=["a"]), "groups[0].completions"),
        (Group(rewards=[1.0], completions=[3]), "groups[0].completions[0]"),  # type: ignore[list-item]
        (Group(rewards=[1.0, 1.0], embeddings=[[1, 0]]), "groups[0].embeddings"),
        (Group(rewards=[1.0, 1.0], embeddings=[[1, 0], [1]]), "groups[0].embeddings"),
        (Group(rewards=[1.0, 1.0], embeddings=[[1, 0], [0, 0]]), "groups[0].embeddings[1]"),
        (
            Group(rewards=[1.0, 1.0], embeddings=[[1, 0], [float("nan"), 0]]),
            "groups[0].embeddings[1]",
        ),
    ],
)
def test_bad_groups_name_the_field(bare: ReweightEngine, group: Group, field: str) -> None:
    with pytest.raises(InvalidInput) as e:
        bare.reweight(ReweightRequest(groups=[group]))
    assert e.value.field == field


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"method": "ucb"}, "method"),
        ({"method": "dra", "params": {"lambda": 0.5}}, "params.lambda"),
        ({"method": "mmr", "params": {"similarity_floor": 0.0}}, "params.similarity_floor"),
        ({"method": "mmr", "params": {"lambda": 1.5}}, "params.lambda"),
        ({"method": "none", "params": {"lambda": 0.5}}, "params.lambda"),
        # The kernels trust the engine's parameters: every rule the public kernels check on
        # their keyword arguments is checked here, on the one validation path, as well.
        ({"method": "mmr", "params": {"lambda": -0.1}}, "params.lambda"),
        ({"method": "mmr", "params": {"lambda": math.nan}}, "params.lambda"),
        ({"method": "mmr", "params": {"lambda": "fast"}}, "params.lambda"),
        ({"method": "mmr", "params": {"lambda": True}}, "params.lambda"),
        ({"method": "dra", "params": {"similarity_floor": 2.0}}, "params.similarity_floor"),
        ({"method": "dra", "params": {"similarity_floor": math.nan}}, "params.similarity_floor"),
        ({"method": "dra", "params": {"eps": 0.0}}, "params.eps"),
        ({"method": "dra", "params": {"eps": math.inf}}, "params.eps"),
        ({"method": ["dra"]}, "method"),
        ({"advantages": "ppo"}, "advantages"),
        ({"groups": []}, "groups"),
    ],
)
def test_bad_request_names_the_field(bare: ReweightEngine, kwargs: dict, field: str) -> None:
    req = {"groups": [Group(rewards=[1.0], embeddings=[[1.0]])], **kwargs}
    with pytest.raises(InvalidInput) as e:
        bare.reweight(ReweightRequest(**req))
    assert e.value.field == field


@pytest.mark.parametrize(
    ("groups", "field"),
    [
        ([Group(rewards=[1.0], embeddings=[[1.0]])] * 5, "groups"),
        ([Group(rewards=[1.0] * 6, embeddings=[[1.0]] * 6)], "groups[0].rewards"),
        ([Group(rewards=[1.0] * 5, embeddings=[[1.0]] * 5)] * 2, "groups"),
        ([Group(rewards=[1.0, 1.0], completions=["x" * 30, "y" * 30])], "groups"),
    ],
)
def test_limits(limited: ReweightEngine, groups: list[Group], field: str) -> None:
    with pytest.raises(LimitExceeded) as e:
        limited.reweight(ReweightRequest(groups=groups))
    assert e.value.field == field


async def test_async_path_says_not_ready_before_load(bare: ReweightEngine) -> None:
    with pytest.raises(NotReady):
        await bare.areweight(ReweightRequest(groups=[Group(rewards=[1.0], completions=["a"])]))
    # embeddings-only requests need no model
    res = await bare.areweight(ReweightRequest(groups=[Group(rewards=[1.0], embeddings=[[1.0]])]))
    assert res.groups[0].rewards == pytest.approx([1 / (1 + 1e-6)])


def test_collapsing_group_on_the_real_model(engine: ReweightEngine) -> None:
    from reweighter.demo import COMPLETIONS, REWARDS

    res = engine.reweight(
        ReweightRequest(groups=[Group(rewards=REWARDS, completions=COMPLETIONS)], method="dra")
    )
    r = res.groups[0].rewards
    assert res.model == engine.embedder.model_id
    assert r[6] == pytest.approx(0.0)  # a zero reward stays zero
    # the distinct correct path keeps more credit than any near-copy of the collapsed path
    assert r[7] > max(r[:6])
    assert 0.5 < res.groups[0].stats.mean_similarity < 1.0


def test_text_and_embedding_groups_agree(engine: ReweightEngine) -> None:
    texts = ["a cat sat on the mat", "a cat sat on a mat", "stock prices fell sharply"]
    vecs = engine.embed(texts).embeddings
    by_text = engine.reweight(ReweightRequest(groups=[Group(rewards=[1, 2, 3], completions=texts)]))
    by_vec = engine.reweight(
        ReweightRequest(groups=[Group(rewards=[1, 2, 3], embeddings=vecs.tolist())])
    )
    assert by_text.groups[0].rewards == pytest.approx(by_vec.groups[0].rewards, abs=1e-5)
    assert by_vec.model is None and by_text.model is not None


async def test_async_equals_sync(engine: ReweightEngine) -> None:
    req = ReweightRequest(
        groups=[Group(rewards=[1, 0, 1], completions=["x = 1", "x = 2", "so x is one"])],
        method="mmr",
        advantages="dr_grpo",
    )
    a, s = await engine.areweight(req), engine.reweight(req)
    assert a.groups[0].rewards == pytest.approx(s.groups[0].rewards, abs=1e-5)
    assert a.groups[0].advantages == pytest.approx(s.groups[0].advantages, abs=1e-5)


def test_info_lists_methods_and_limits(engine: ReweightEngine) -> None:
    info = engine.info()
    assert set(info["methods"]) == {"dra", "mmr", "darling", "outcome_ucb", "none"}
    assert "lambda" in info["methods"]["mmr"]["params"]["properties"]
    assert info["dim"] == 384 and info["ready"] is True
    assert info["limits"]["max_groups"] == engine.settings.max_groups


def test_names_are_enums_equal_to_their_strings(bare: ReweightEngine) -> None:
    group = Group(rewards=[1.0, 0.5], embeddings=[[1.0, 0.0], [0.6, 0.8]])
    by_enum = bare.reweight(ReweightRequest([group], Method.MMR, {"lambda": 0.5}, "grpo"))
    by_name = bare.reweight(
        ReweightRequest([group], "mmr", {"lambda": 0.5}, AdvantageKind.GRPO)
    )
    assert by_enum == by_name and by_enum.method == "mmr"
    assert by_enum.groups[0].advantages is not None
    known = "dra, mmr, darling, outcome_ucb, none"
    with pytest.raises(InvalidInput, match=rf"unknown method 'ucb'; known: {known}"):
        bare.reweight(ReweightRequest([group], "ucb"))
    with pytest.raises(InvalidInput, match=r"unknown advantage kind 'ppo'; known: grpo, dr_grpo"):
        bare.reweight(ReweightRequest([group], advantages="ppo"))
    info = bare.info()
    assert info["advantages"] == [k.value for k in AdvantageKind]
    assert set(info["methods"]) == {m.value for m in Method}
    assert info["long_text"] in {p.value for p in LongTextPolicy}


def test_errors_are_immutable_and_survive_pickling() -> None:
    err = Overloaded("queue full", field="groups", retry_after=2.0)
    with pytest.raises(AttributeError, match="immutable"):
        err.field = "other"  # type: ignore[misc]
    with pytest.raises(AttributeError, match="immutable"):
        err.http_status = 500  # type: ignore[misc]
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is Overloaded and str(back) == "groups: queue full"
    assert (back.field, back.retry_after, back.http_status) == ("groups", 2.0, 429)
    rebuilt = error_from("LimitExceeded", "too big", "groups[0]")
    assert isinstance(rebuilt, LimitExceeded) and rebuilt.field == "groups[0]"
    assert type(error_from("NoSuchError", "x", None)) is ReweighterError
    assert (ConnectionFailed.http_status, ConnectionFailed.grpc_code) == (503, "UNAVAILABLE")
    custom = ReweighterError("teapot", http_status=418)
    assert custom.http_status == 418 and ReweighterError.http_status == 500


@pytest.mark.parametrize("ragged", [False, True])
def test_an_overflowing_result_is_refused_naming_its_group(
    bare: ReweightEngine, ragged: bool
) -> None:
    """grpo's std of +-1.7e308 overflows float64: the group is refused by name, whether the
    groups are all full (the unmasked check) or of mixed sizes (the masked one), and a
    well-behaved group beside it does not hide it."""
    emb = np.eye(3, 2, dtype=np.float32) + 0.1
    full = Group([1.0, 0.5, 0.0], embeddings=emb)
    first = Group([1.0, 0.5], embeddings=emb[:2]) if ragged else full
    request = ReweightRequest(
        groups=[first, Group([1.7e308, -1.7e308, 0.0], embeddings=emb)],
        method="dra",
        advantages=AdvantageKind.GRPO,
    )
    with pytest.raises(InvalidInput) as info:
        bare.reweight(request)
    assert info.value.field == "groups[1].rewards"

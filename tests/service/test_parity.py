"""One engine, two transports: the same request gives the same answer over HTTP, gRPC and
in-process, for texts and for precomputed embeddings."""

from __future__ import annotations

import math

import httpx
import numpy as np
import pytest

from reweighter.client import GrpcReweighterClient, ReweighterClient
from reweighter.engine import ReweightEngine
from reweighter.service import BackgroundService
from reweighter.types import Group, ReweightRequest

COPIES = [
    "17 * 24 = 17 * 20 + 17 * 4 = 340 + 68 = 408. The answer is 408.",
    "17 * 24 = 17 * 20 + 17 * 4 = 340 + 68 = 408. So the answer is 408.",
    "We have 17 * 24 = 17 * 20 + 17 * 4 = 340 + 68 = 408. The answer is 408.",
]
WRONG = "17 * 24 = 17 * 25 - 17 = 425 - 17 = 398. The answer is 398."
DISTINCT = "Halve and double: 17 * 24 = 34 * 12 = 68 * 6 = 408."
TEXTS = [*COPIES, WRONG, DISTINCT]
REWARDS = [1.0, 1.0, 1.0, 0.0, 1.0]


def _requests() -> list[ReweightRequest]:
    text_group = Group(rewards=REWARDS, completions=TEXTS, id="texts")
    rng = np.random.default_rng(0)
    vecs = rng.normal(size=(4, 16)).astype(np.float32)
    emb_group = Group(rewards=[0.5, 1.0, 0.0, 1.0], embeddings=vecs.tolist(), id="vectors")
    return [
        ReweightRequest(groups=[text_group], method="dra", advantages="grpo"),
        ReweightRequest(groups=[text_group], method="mmr", advantages="dr_grpo"),
        ReweightRequest(
            groups=[text_group, emb_group], method="mmr", params={"lambda": 0.3}, advantages="none"
        ),
        ReweightRequest(groups=[emb_group], method="dra", params={"similarity_floor": None}),
        ReweightRequest(groups=[emb_group, text_group], method="none", advantages="grpo"),
        # a group's quality (issue 49) beside a group without one
        ReweightRequest(
            groups=[
                Group(rewards=[1.5, 2.0, 0.5, 2.0], embeddings=vecs.tolist(), id="quality",
                      quality=[0.5, 1.0, -0.5, 1.0]),  # fmt: skip
                text_group,
            ],
            method="dra",
            advantages="grpo",
        ),
    ]


@pytest.mark.parametrize("index", range(6))
def test_http_grpc_and_in_process_agree(
    index: int,
    http: ReweighterClient,
    grpc_client: GrpcReweighterClient,
    engine: ReweightEngine,
) -> None:
    request = _requests()[index]
    over_http = http.reweight(request)
    over_grpc = grpc_client.reweight(request)
    assert over_http == over_grpc  # bit-identical: both carry float64 results exactly
    local = engine.reweight(request)
    assert [g.id for g in over_http.groups] == [g.id for g in request.groups]
    assert over_http.method == request.method
    uses_texts = any(g.completions is not None for g in request.groups)
    assert over_http.model == (engine.embedder.model_id if uses_texts else None)
    for served, ref in zip(over_http.groups, local.groups, strict=True):
        # the served path batches texts differently from the sync path: equal up to float noise
        assert served.rewards == pytest.approx(ref.rewards, abs=1e-4)
        assert served.stats.mean_similarity == pytest.approx(ref.stats.mean_similarity, abs=1e-4)
        assert (served.advantages is None) == (request.advantages == "none")
        assert (served.stats.lambda_ is None) == (request.method != "mmr")


def test_hand_computed_dra_over_both_transports(
    http: ReweighterClient, grpc_client: GrpcReweighterClient
) -> None:
    # two identical vectors and one orthogonal: similarity row sums 2, 2, 1 (s_ii = 1)
    group = Group(rewards=[1.0, 1.0, 1.0], embeddings=[[1, 0], [1, 0], [0, 1]])
    request = ReweightRequest(groups=[group], method="dra", advantages="grpo")
    for client in (http, grpc_client):
        g = client.reweight(request).groups[0]
        assert g.rewards == pytest.approx([1 / 2, 1 / 2, 1.0], abs=1e-5)
        assert g.stats.mean_similarity == pytest.approx(1 / 3, abs=1e-6)
        std = math.sqrt((1 / 36 + 1 / 36 + 1 / 9) / 2)  # sample std of [1/2, 1/2, 1]
        expected = [(x - 2 / 3) / std for x in (0.5, 0.5, 1.0)]
        assert g.advantages == pytest.approx(expected, abs=1e-3)


def test_near_copies_lose_reward_to_the_distinct_solution(http: ReweighterClient) -> None:
    g = http.reweight(ReweightRequest(groups=[Group(REWARDS, TEXTS)], method="dra")).groups[0]
    assert g.rewards[3] == 0.0  # a zero reward stays zero
    assert g.rewards[4] > max(g.rewards[:3])  # the distinct correct path beats each near-copy


def test_embed_agrees_across_transports(
    http: ReweighterClient, grpc_client: GrpcReweighterClient, engine: ReweightEngine
) -> None:
    texts = ["a short text", DISTINCT, "another one"]
    a, b = http.embed(texts), grpc_client.embed(texts)
    assert a.model == b.model == engine.embedder.model_id
    assert a.dim == b.dim == 384
    assert a.embeddings.shape == (3, 384) and a.embeddings.dtype == np.float32
    np.testing.assert_array_equal(a.embeddings, b.embeddings)
    np.testing.assert_allclose(np.linalg.norm(a.embeddings, axis=1), 1.0, atol=1e-4)
    np.testing.assert_allclose(a.embeddings, engine.embed(texts).embeddings, atol=1e-4)


def test_embed_http_wire_format(service: BackgroundService) -> None:
    """TEI's shape: one string or a list; `normalize: false` is refused, not ignored."""
    one = httpx.post(f"{service.http_url}/v1/embed", json={"inputs": "hello"})
    assert one.status_code == 200
    body = one.json()
    assert body["dim"] == 384 and len(body["embeddings"]) == 1
    assert len(body["embeddings"][0]) == 384
    raw = httpx.post(f"{service.http_url}/v1/embed", json={"inputs": ["x"], "normalize": False})
    assert raw.status_code == 422
    assert raw.json()["error"]["field"] == "normalize"


def test_info_agrees_across_transports(
    http: ReweighterClient, grpc_client: GrpcReweighterClient
) -> None:
    a, b = http.info(), grpc_client.info()
    for key in ("model", "dim", "device", "version", "long_text", "advantages", "limits", "ready"):
        assert a[key] == b[key], key
    methods = {"dra", "mmr", "darling", "outcome_ucb", "none"}
    assert set(a["methods"]) == set(b["methods"]) == methods
    assert "lambda" in b["methods"]["mmr"]["params"]["properties"]
    assert a["ready"] is True and a["dim"] == 384


def test_http_response_omits_what_was_not_asked(service: BackgroundService) -> None:
    body = {"method": "dra", "groups": [{"rewards": [1, 0], "embeddings": [[1, 0], [0, 1]]}]}
    out = httpx.post(f"{service.http_url}/v1/reweight", json=body).json()
    group = out["groups"][0]
    assert out["model"] is None  # no text was embedded
    assert "advantages" not in group  # advantages default to "none"
    assert "lambda" not in group["stats"]  # only MMR reports lambda
    assert group["id"] is None and group["rewards"] == pytest.approx([1.0, 0.0], abs=1e-5)

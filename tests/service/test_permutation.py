"""Acceptance (issue 22): over /v1/reweight, a permuted group gets the permuted answer, ties
included, for dra and mmr; a group whose rewards all agree gets zero advantages under mmr's
default, as GRPO gives."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from reweighter.service import BackgroundService

GROUPS = 60


def _groups(seed: int) -> list[dict]:
    """60 groups of 2-16 members with 0/1 (or 3-level) rewards, so ties are everywhere; some
    members are copies of others (same vector, another length), as repeated completions are."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(GROUPS):
        g = int(rng.integers(2, 17))
        levels = [0.0, 1.0] if k % 3 else [-1.0, 0.0, 2.0]
        rewards = rng.choice(levels, size=g)
        emb = rng.normal(size=(g, 24)) + (1.5 if k % 2 else 0.0)  # alike, or spread out
        for i in range(1, g):
            if rng.random() < 0.2:
                j = int(rng.integers(0, i))
                emb[i], rewards[i] = emb[j] * rng.uniform(0.5, 2.0), rewards[j]
        out.append({"id": f"g{k}", "rewards": rewards.tolist(), "embeddings": emb.tolist()})
    return out


def _post(url: str, method: str, params: dict, groups: list[dict]) -> list[dict]:
    body = {"method": method, "params": params, "advantages": "grpo", "groups": groups}
    resp = httpx.post(f"{url}/v1/reweight", json=body, timeout=60)
    assert resp.status_code == 200, resp.text
    return resp.json()["groups"]


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("dra", {}),
        ("mmr", {}),
        ("mmr", {"lambda": 0.6}),
        ("mmr", {"equal_rewards": "diversify"}),
    ],
)
def test_permuted_groups_get_permuted_answers(
    service: BackgroundService, method: str, params: dict
) -> None:
    groups = _groups(0)
    rng = np.random.default_rng(1)
    perms = [rng.permutation(len(g["rewards"])) for g in groups]
    permuted = [
        {
            "id": g["id"],
            "rewards": [g["rewards"][i] for i in p],
            "embeddings": [g["embeddings"][i] for i in p],
        }
        for g, p in zip(groups, perms, strict=True)
    ]
    base = _post(service.http_url, method, params, groups)
    moved = _post(service.http_url, method, params, permuted)
    spread = 0.0
    for b, m, p in zip(base, moved, perms, strict=True):
        np.testing.assert_allclose(m["rewards"], np.asarray(b["rewards"])[p], atol=1e-5)
        np.testing.assert_allclose(m["advantages"], np.asarray(b["advantages"])[p], atol=1e-5)
        spread = max(spread, float(np.ptp(b["rewards"])))
    assert spread > 0.1  # the method did move rewards: equivariance of something non-trivial


def test_equal_rewards_under_mmr_default_give_zero_advantages(service: BackgroundService) -> None:
    groups = _groups(2)
    for k, g in enumerate(groups):
        g["rewards"] = [float(k % 3)] * len(g["rewards"])  # all wrong, all right, all 2
    for out in _post(service.http_url, "mmr", {}, groups):
        assert out["advantages"] == [0.0] * len(out["advantages"])
        assert out["stats"]["lambda"] == 1.0
    # The paper's behaviour, on request: the novelty term spreads most such groups (not those
    # whose members are copies, or only unlike each other: redundancy counts from 0).
    diversified = _post(service.http_url, "mmr", {"equal_rewards": "diversify"}, groups)
    spread = [max(map(abs, out["advantages"])) > 0.1 for out in diversified]
    assert sum(spread) >= 40, sum(spread)

"""`MethodSpec.needs_similarity` is read by the engine: a method that declares False gets
`sim=None` in its kernel, one that declares True gets the group's [B, G, G] similarities; the
statistics are computed either way (docs/methods.md, "The catalogue")."""

from __future__ import annotations

import pytest
import torch

from reweighter.config import Settings
from reweighter.engine import ReweightEngine
from reweighter.methods.catalog import CATALOG, MethodSpec
from reweighter.types import Group, ReweightRequest

SEEN: list[torch.Tensor | None] = []


def record(rewards, sim, mask, params):  # noqa: ANN001, ANN201 - the kernel signature
    """A kernel that keeps what the engine handed it and leaves the rewards alone."""
    SEEN.append(sim)
    return rewards.clone(), None


@pytest.mark.parametrize("needs", [False, True])
def test_the_kernel_gets_a_similarity_only_when_it_declares_it(
    needs: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = f"record-{needs}"
    spec = MethodSpec(name, "records its input", params="reweighter.methods.params:NoneParams",
                      kernel=f"{__name__}:record", needs_similarity=needs)  # fmt: skip
    monkeypatch.setitem(CATALOG, name, spec)
    SEEN.clear()
    e = [[1.0, 0.0], [0.6, 0.8], [1.0, 0.0]]  # unit vectors: cos(0,1) = 0.6, 0 and 2 equal
    out = ReweightEngine(Settings()).reweight(
        ReweightRequest(groups=[Group(rewards=[1.0, 0.0, 1.0], embeddings=e)], method=name)
    )
    (sim,) = SEEN
    if needs:
        assert sim is not None and tuple(sim.shape) == (1, 3, 3)
        assert sim[0, 0, 1].item() == pytest.approx(0.6) and sim[0, 0, 2].item() == pytest.approx(1)
    else:
        assert sim is None
    assert out.groups[0].rewards == [1.0, 0.0, 1.0]
    # mean pairwise similarity, (0.6 + 1.0 + 0.6) / 3, reported either way
    assert out.groups[0].stats.mean_similarity == pytest.approx(2.2 / 3, abs=1e-6)

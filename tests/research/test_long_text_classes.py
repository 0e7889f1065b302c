"""issue 36 item 3: the `long_text` default is chosen by class agreement on long real
completions (experiments/long-text-classes, bench/tools/long_text_classes.py).

The fast tests recompute every figure of results.json from the committed completions (their
answer classes) and the committed per-group cosine similarities, and check that the service's
default is the one the pre-stated rule gives. The slow test embeds the completions again with
the bundled MiniLM (six policies over long texts: minutes on a loaded 2-core CPU) and checks
the committed similarities are the encoder's."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "experiments" / "long-text-classes"


def tool():
    spec = importlib.util.spec_from_file_location(
        "long_text_classes", REPO / "bench" / "tools" / "long_text_classes.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def committed():
    mod = tool()
    results = json.loads((DATA / mod.RESULTS).read_text())
    groups = mod.groups_of(mod.load(DATA))
    return mod, results, groups


def test_labels_are_the_completions_last_answers(committed) -> None:
    mod, results, groups = committed
    assert len(groups) == results["data"]["groups"] and len(groups) >= 4
    assert all(len(g) == mod.GROUP for g in groups)
    assert mod.labels_of(groups) == results["labels"]


def test_every_figure_recomputes_from_the_committed_similarities(committed) -> None:
    mod, results, _ = committed
    again = mod.summarise(results["similarities"], results["labels"], results["threshold"])
    assert again["policies"] == results["policies"]
    assert again["decision"] == results["decision"]
    from reweighter.methods.params import CLASS_THRESHOLD

    assert results["threshold"] == CLASS_THRESHOLD  # the rule's threshold: the service's own


def test_the_default_is_the_rules_choice(committed) -> None:
    _, results, _ = committed
    from reweighter.config import Settings

    want = "spread" if results["decision"]["spread_default"] else "chunk_mean"
    assert str(Settings().long_text.value) == want
    doc = (REPO / "docs" / "embedding.md").read_text()
    assert f"| `{want}` (default)" in doc


@pytest.mark.slow
def test_the_similarities_are_minilms(committed) -> None:
    import numpy as np
    import torch

    from reweighter.embedding.sentence_transformers import SentenceTransformerEncoder
    from reweighter.methods import cosine_similarity

    mod, results, groups = committed
    texts = [r["completion"] for g in groups for r in g]
    base = SentenceTransformerEncoder.load(None, device="cpu", compile="off")
    pieces = [len(x) for x in base.stage.token_ids(texts)]
    assert sum(p > 4 * 254 for p in pieces) == results["data"]["minilm_pieces"]["over_1016"]
    for name in ("spread4", "chunk_mean"):
        enc = SentenceTransformerEncoder.load(None, device="cpu", compile="off",
                                         **mod.POLICIES[name])
        v = torch.from_numpy(np.asarray(enc.encode(texts))).reshape(len(groups), mod.GROUP, -1)
        sim = cosine_similarity(v).numpy()
        np.testing.assert_allclose(sim, np.array(results["similarities"][name]), atol=1e-4)

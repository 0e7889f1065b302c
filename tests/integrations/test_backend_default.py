"""Leaving the backend out means one thing everywhere, and the docs say that thing once: the
options model's default URL (`http://127.0.0.1:8080`, a service on this machine), for TRL's
`reweighted(...)` without `backend=`, for the trainer's `reweighter:` section without `url`, and
in docs/integrations.md's options table and docs/trainer.md (which once said "in process")."""

from __future__ import annotations

from pathlib import Path

from reweighter.client import DEFAULT_URL
from reweighter.integrations.options import ReweighterOptions

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_the_default_backend_is_the_local_service_everywhere() -> None:
    from reweighter.integrations.trl import reweighted
    from reweighter_trainer.config import parse

    assert ReweighterOptions().url == DEFAULT_URL == "http://127.0.0.1:8080"
    reward = reweighted(lambda **_: [1.0, 0.0], num_generations=2)
    assert reward.backend.aio.base_url == DEFAULT_URL  # an HTTP client, not the engine
    cfg = parse({"model": {"tiny": {}}, "reweighter": {"method": "mmr"}})
    assert (cfg.reweighter.url, cfg.reweighter.backend) == (DEFAULT_URL, "http")


def test_the_docs_say_that_default() -> None:
    table = (DOCS / "integrations.md").read_text().split("<!-- options-table:", 1)[1]
    (url_row,) = [r for r in table.split("\n\n", 1)[0].splitlines() if r.startswith("| `url`")]
    default = url_row.split("|")[2]
    assert f"`{DEFAULT_URL}`" in default and "in process)" not in default
    trainer = " ".join((DOCS / "trainer.md").read_text().split())
    assert f"no `url` is `{DEFAULT_URL}`" in trainer
    assert "is the in-process engine" not in trainer

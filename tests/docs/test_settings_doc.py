"""docs/service.md's settings table is the one settings reference: rendered from
`reweighter.config.Settings` by scripts/settings_doc.py, it fails here when a field has no
description, when the page's table is not what the script renders (a field added, a default or a
description changed), and when a flag of `reweighter serve` is missing from it."""

from __future__ import annotations

import argparse
import re
import runpy
from pathlib import Path

from reweighter.config import Settings
from reweighter.server import configure_parser

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "settings_doc.py"
DOC = runpy.run_path(str(SCRIPT))


def _table() -> str:
    page = (ROOT / "docs" / "service.md").read_text()
    return page.split(DOC["BEGIN"], 1)[1].split(DOC["END"], 1)[0].strip()


def test_every_setting_has_a_description() -> None:
    missing = [name for name, f in Settings.model_fields.items() if not f.description]
    assert not missing, f"Settings fields without a description (config.py): {missing}"


def test_the_page_holds_the_rendered_table() -> None:
    assert _table() == DOC["render"](), (
        "docs/service.md's settings table is stale: run .venv/bin/python scripts/settings_doc.py"
    )


def test_every_flag_of_serve_is_a_row() -> None:
    flags = {
        f
        for a in configure_parser(argparse.ArgumentParser())._actions
        for f in a.option_strings
        if f.startswith("--") and f != "--help"
    }
    documented = set(re.findall(r"`(--[\w-]+)`", _table()))
    assert flags == documented, (flags - documented, documented - flags)
    assert len(flags) > len(Settings.model_fields)  # every field, --no-compile, --shutdown-grace


def test_a_stale_page_is_rendered_back() -> None:
    """What `--check` compares: a page with a row dropped differs from its rendering, and the
    rendering is the page as committed."""
    page = (ROOT / "docs" / "service.md").read_text()
    stale = page.replace(DOC["render"]().splitlines()[-1] + "\n", "")
    assert stale != page
    assert DOC["replaced"](stale) == page
    assert DOC["replaced"](page) == page

"""docs/operations.md's limits table matches the code: each Settings field it lists has the
default the table states."""

from __future__ import annotations

import re
from pathlib import Path

from reweighter.config import Settings
from reweighter.server import DEFAULT_GRACE_S

DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
ROW = re.compile(r"^\| `([a-z_-]+)` \| ([^|]+) \|", re.M)


def test_limits_table_defaults_match_settings() -> None:
    text = DOC.read_text()
    limits = text[text.index("## Limits") : text.index("## Logs")]
    rows = dict(ROW.findall(limits))
    fields = Settings.model_fields
    checked = 0
    for name, stated in rows.items():
        stated = stated.strip()
        if name == "--shutdown-grace":
            assert stated == f"{DEFAULT_GRACE_S:g} s"
        elif fields[name].default is None:
            assert stated.startswith("unset"), (name, stated)
        else:
            assert stated == str(fields[name].default), (name, stated, fields[name].default)
        checked += 1
    must = {"max_chars", "max_connections", "header_timeout_s", "body_timeout_s", "api_key"}
    assert must <= set(rows) and checked >= 12

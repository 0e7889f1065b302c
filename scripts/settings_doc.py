"""docs/service.md's settings table, rendered from `reweighter.config.Settings`: one row per field
(flag, environment variable, default, its description), written between the markers
`<!-- settings: begin -->` and `<!-- settings: end -->`. A field added to Settings is a row
after one run; tests/docs/test_settings_doc.py fails while the page's table is stale or a field
has no description.

    .venv/bin/python scripts/settings_doc.py           # rewrite the table in docs/service.md
    .venv/bin/python scripts/settings_doc.py --check   # exit 1 when it is stale
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from reweighter.config import _ENV_NAMES, Settings, _show
from reweighter.server import configure_parser

PAGE = Path(__file__).resolve().parents[1] / "docs" / "service.md"
BEGIN, END = "<!-- settings: begin -->", "<!-- settings: end -->"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def rows() -> list[tuple[str, str, str, str]]:
    out = []
    for name, field in Settings.model_fields.items():
        flag = f"`--{name.replace('_', '-')}`"
        if name == "compile":
            flag += ", `--no-compile`"
        env = _ENV_NAMES.get(name, f"REWEIGHTER_{name.upper()}")
        default = "unset" if field.default is None else _show(field.default)
        out.append((flag, f"`{env}`", f"`{default}`", field.description or ""))
    return out + others()


def others() -> list[tuple[str, str, str, str]]:
    """The flags of `reweighter serve` that are not Settings fields (server.py), from its
    parser: no environment variable."""
    fields = {f"--{n.replace('_', '-')}" for n in Settings.model_fields} | {"--no-compile", "-h"}
    out = []
    parser = configure_parser(argparse.ArgumentParser())
    for action in parser._actions:
        flags = [f for f in action.option_strings if f not in fields and f != "--help"]
        if flags:
            help_text = (action.help or "").replace(" (default %(default)s)", "")
            out.append((f"`{flags[0]}`", "", f"`{action.default}`", help_text))
    return out


def render() -> str:
    lines = ["| flag | env | default | what |", "|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {_cell(d)} |" for a, b, c, d in rows()]
    return "\n".join(lines)


def replaced(page: str) -> str:
    head, found, rest = page.partition(BEGIN)
    _, found_end, tail = rest.partition(END)
    if not (found and found_end):
        raise SystemExit(f"{PAGE}: the markers {BEGIN} ... {END} are missing")
    return f"{head}{BEGIN}\n{render()}\n{END}{tail}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when the page is stale")
    args = ap.parse_args()
    page = PAGE.read_text()
    new = replaced(page)
    if args.check:
        if new != page:
            print(f"{PAGE} is stale: run python scripts/settings_doc.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())

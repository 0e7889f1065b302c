"""Every answer README.md and docs/ print is what a live service answers (issue 29 point 9).

The service is the real one on loopback (tests/conftest.py's `service`: uvicorn + grpc.aio
over the real engine and bundled model). Two forms of printed answers are found and held:

- a shell transcript (a fenced block with `$ curl ...` lines, each followed by what it
  printed): every command is run with the real `curl`, `localhost:8080` pointed at the live
  service, and its output compared with the printed one;
- a request/answer pair: `<!-- example-request: ID METHOD PATH -->` before a fenced JSON body
  (one or several per ID: they are sent concurrently, as group members are) and
  `<!-- example-answer: ID STATUS -->` before the fenced JSON the first of them gets.

Every fenced `json` block must carry one of those markers, so an answer cannot be printed
without being checked. Numbers compare to the precision printed (0.62 holds 0.615..0.625,
never looser than two decimals); a full-precision number to 1e-5, for another CPU's float
rounding. Keys and strings compare exactly.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
MARK = re.compile(r"<!-- example-(request|answer): (\S+) (\S+)(?: (\S+))? -->\s*\n```")


def rel(page: Path) -> str:
    return str(page.relative_to(ROOT))


# -- comparing a printed answer with a live one -------------------------------------------------
def _decimals(token: str) -> int | None:
    """Decimals printed for a number token; None for a full-precision float or an integer."""
    m = re.fullmatch(r"-?\d+\.(\d+)", token)
    if m is None or len(m.group(1)) > 6:
        return None
    return len(m.group(1))


def _parse_keeping_precision(text: str) -> Any:
    """JSON whose floats remember how many decimals were printed."""
    return json.loads(text, parse_float=lambda s: _Printed(float(s), _decimals(s)))


class _Printed(float):
    decimals: int | None

    def __new__(cls, value: float, decimals: int | None) -> _Printed:
        self = super().__new__(cls, value)
        self.decimals = decimals
        return self


def same(printed: Any, live: Any, where: str = "") -> list[str]:
    """Differences between a printed answer and the live one (empty: they agree)."""
    if isinstance(printed, dict) and isinstance(live, dict):
        if printed.keys() != live.keys():
            return [f"{where or '.'}: keys {sorted(printed)} printed, {sorted(live)} answered"]
        return [d for k in printed for d in same(printed[k], live[k], f"{where}.{k}")]
    if isinstance(printed, list) and isinstance(live, list):
        if len(printed) != len(live):
            return [f"{where}: {len(printed)} items printed, {len(live)} answered"]
        pairs = enumerate(zip(printed, live, strict=True))
        return [d for i, (p, q) in pairs for d in same(p, q, f"{where}[{i}]")]
    if isinstance(printed, _Printed) and isinstance(live, int | float):
        d = printed.decimals
        tol = 1e-5 if d is None else 0.5 * 10.0 ** -max(d, 2) + 1e-9
        ok = abs(printed - live) <= tol
        return [] if ok else [f"{where}: {printed} printed, {live} answered"]
    if isinstance(printed, int | float) and isinstance(live, int | float) and printed == live:
        return []
    return [] if printed == live else [f"{where}: {printed!r} printed, {live!r} answered"]


# -- shell transcripts ----------------------------------------------------------------------------
@dataclass
class Transcript:
    page: str
    command: str
    printed: str


def transcripts() -> list[Transcript]:
    out = []
    for page in PAGES:
        for block in FENCE.finditer(page.read_text()):
            lines, i = block.group(2).splitlines(), 0
            while i < len(lines):
                if not lines[i].startswith("$ curl "):
                    i += 1
                    continue
                command = lines[i][2:]
                i += 1
                while command.count("'") % 2:  # a quoted body spans lines
                    command += "\n" + lines[i]
                    i += 1
                printed = []
                while i < len(lines) and not lines[i].startswith("$ "):
                    printed.append(lines[i])
                    i += 1
                out.append(Transcript(rel(page), command, "\n".join(printed)))
    return out


TRANSCRIPTS = transcripts()


def test_the_pages_print_transcripts() -> None:
    assert len(TRANSCRIPTS) >= 2, "README's compose transcript (readyz, reweight) is gone"


@pytest.mark.parametrize("t", TRANSCRIPTS, ids=lambda t: f"{t.page}:{t.command[:40]}")
def test_a_printed_curl_output_is_what_curl_prints(t: Transcript, service) -> None:
    base = service.http_url.removeprefix("http://")
    argv = [a.replace("localhost:8080", base) for a in shlex.split(t.command)]
    assert argv[0] == "curl" and any(base in a for a in argv), t.command
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    diffs = same(_parse_keeping_precision(t.printed), json.loads(done.stdout))
    assert not diffs, f"{t.page}: `{t.command[:60]}...` now prints\n{done.stdout}\n" + "\n".join(
        diffs
    )


# -- request/answer pairs -------------------------------------------------------------------------
@dataclass
class Example:
    page: str
    ident: str
    requests: list[tuple[str, str, str]] = field(default_factory=list)  # method, path, body
    answer: str | None = None
    status: int = 200


def examples() -> dict[str, Example]:
    found: dict[str, Example] = {}
    for page in PAGES:
        text = page.read_text()
        marked = set()
        for m in MARK.finditer(text):
            kind, ident = m.group(1), m.group(2)
            body = FENCE.match(text, m.end() - 3)
            assert body is not None, (rel(page), ident)
            marked.add(body.start())
            ex = found.setdefault(ident, Example(rel(page), ident))
            if kind == "request":
                ex.requests.append((m.group(3), m.group(4), body.group(2)))
            else:
                assert ex.answer is None, f"{ident}: two answers"
                ex.answer, ex.status = body.group(2), int(m.group(3))
        for block in FENCE.finditer(text):
            if block.group(1) == "json":
                assert block.start() in marked, (
                    f"{rel(page)}: a json block without an example-request/example-answer "
                    f"marker (so nothing checks it): {block.group(2)[:80]!r}"
                )
    return found


EXAMPLES = examples()


def test_every_example_has_requests_and_an_answer() -> None:
    assert EXAMPLES, "no marked examples found"
    for ex in EXAMPLES.values():
        assert ex.requests and ex.answer is not None, ex


ANSWERED = [ex for ex in EXAMPLES.values() if ex.answer is not None]


@pytest.mark.parametrize("ex", ANSWERED, ids=lambda ex: f"{ex.page}:{ex.ident}")
def test_a_printed_answer_is_what_the_service_answers(ex: Example, service) -> None:
    def send(request: tuple[str, str, str]) -> httpx.Response:
        method, path, body = request
        return httpx.request(method, service.http_url + path, content=body.encode(),
                             headers={"content-type": "application/json"}, timeout=120)  # fmt: skip

    with ThreadPoolExecutor(len(ex.requests)) as pool:
        first = list(pool.map(send, ex.requests))[0]
    assert first.status_code == ex.status, first.text
    assert ex.answer is not None
    diffs = same(_parse_keeping_precision(ex.answer), first.json())
    assert not diffs, f"{ex.page} {ex.ident}: the service answers\n{first.text}\n" + "\n".join(
        diffs
    )

"""Token ids of plain-ASCII texts for less CPU: the model's tokenizer with a lowercase-only
normalizer, where that gives exactly the ids the model's own normalizer gives.

Why: tokenising is the floor of the host path (bench/bench_host_path.py), and most of a BERT
tokenizer's CPU is its `BertNormalizer`: cleaning, Chinese-character spacing and accent
stripping (Unicode NFD) over every character, with an alignment kept for each. On a text of
printable ASCII (plus tab, newline and carriage return) all of that is the identity except
lowercasing, so the same tokenizer with `Lowercase` as its only normalizer yields the same ids
for 20-35 % less CPU (MiniLM's tokenizer, 160-word completions; BENCHMARKS.md, Y). Completions
of English and mathematics are such texts; any other text takes the full tokenizer, unchanged.

When exact, term by term, for a text of printable ASCII and \\t \\n \\r:
- clean_text drops control characters (there are none) and turns \\t \\n \\r into spaces; a
  whitespace-splitting pre-tokenizer (BERT's) then splits on either alike, so no piece differs
  (with clean_text on and any other pre-tokenizer: no fast path);
- handle_chinese_chars pads CJK ideographs (none in ASCII); strip_accents (NFD, then drop
  combining marks) changes no ASCII character; lowercase is ASCII lowercase either way;
- added tokens: those matched on the raw text (`normalized: false`) are matched before any
  normalizer in both; one matched on the normalized text could differ where \\t \\n \\r became
  spaces, so a tokenizer with such an added token gets no fast path.

Anything else (another normalizer, a normalized added token) keeps the full tokenizer for every
text: `fast_tokenizer` returns None. tests/unit/test_ascii_ids.py holds the two to the same ids.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

# Characters that are not printable ASCII, tab, newline or carriage return (control characters:
# BertNormalizer's clean_text drops them, so they take the full tokenizer).
_NOT_PLAIN = re.compile(r"[^\t\n\r\x20-\x7e]")


# Pre-tokenizers that split on any whitespace and drop it (so a tab or line break and a space
# give the same pieces): where clean_text turned \t \n \r into spaces, the fast path needs one.
WHITESPACE_SPLITTERS = frozenset({"BertPreTokenizer", "Whitespace", "WhitespaceSplit"})


def plain(text: str) -> bool:
    """Whether `text` is printable ASCII, tabs and line breaks (the fast path's texts).
    `isascii` is O(1) in CPython; the scan runs only on ASCII texts."""
    return text.isascii() and _NOT_PLAIN.search(text) is None


def fast_tokenizer(backend: Any) -> Any | None:
    """A copy of the Rust tokenizer `backend` whose normalizer only lowercases (or does nothing),
    when that is exact on plain texts (module docstring); else None."""
    try:
        from tokenizers import Tokenizer, normalizers
    except ImportError:  # pragma: no cover - transformers' fast tokenizers need it
        return None
    try:
        text = backend.to_str()
        spec = json.loads(text)
    except Exception:
        return None
    norm = spec.get("normalizer")
    if not isinstance(norm, dict) or norm.get("type") != "BertNormalizer":
        return None
    if any(t.get("normalized", True) for t in spec.get("added_tokens") or []):
        return None
    pre = (spec.get("pre_tokenizer") or {}).get("type")
    if norm.get("clean_text", True) and pre not in WHITESPACE_SPLITTERS:
        return None  # \t \n \r would reach a pre-tokenizer that may tell them from spaces
    fast = Tokenizer.from_str(text)
    fast.normalizer = normalizers.Lowercase() if norm.get("lowercase", True) else None
    # transformers' wrapper may have set truncation or padding on the backend: not copied here
    # (the caller tokenises whole texts), and the caller checks the backend has none.
    fast.no_truncation()
    fast.no_padding()
    return fast


def token_ids(backend: Any, fast: Any | None, texts: Sequence[str]) -> list[list[int]]:
    """Ids of each text without special tokens (`encode_batch_fast`: no offsets): plain texts
    through `fast` when there is one, the others through `backend`, in order."""
    texts = list(texts)
    if fast is None:
        return [e.ids for e in backend.encode_batch_fast(texts, add_special_tokens=False)]
    easy = [plain(t) for t in texts]
    if all(easy):
        return [e.ids for e in fast.encode_batch_fast(texts, add_special_tokens=False)]
    out: list[list[int]] = [[] for _ in texts]
    for tokenizer, take in ((fast, True), (backend, False)):
        at = [i for i, e in enumerate(easy) if e is take]
        if at:
            got = tokenizer.encode_batch_fast([texts[i] for i in at], add_special_tokens=False)
            for i, enc in zip(at, got, strict=True):
                out[i] = enc.ids
    return out

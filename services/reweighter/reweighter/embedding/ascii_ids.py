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
text: `fast_tokenizer` returns None. tests/embedding/test_ascii_ids.py holds the two to the same
ids.

**Words remembered (`WordIds`).** Even the lowercase-only copy spends ~0.7 us a token, most of
it on work that repeats: completions of one task reuse their words ("the", "step", "=", "so"),
and a whitespace-delimited word always gives the same ids wherever it stands. So the ids of a
plain text are the ids of its `str.split()` words, joined; `WordIds` keeps each word's ids once
computed and tokenises only the words it has not seen (all of a batch's new words in one call).
On 160-word completions that is ~4x less CPU than the copy alone with a cold cache and ~6x warm
(BENCHMARKS "The host path"). Exact, because for a plain text:
- `str.split()` splits on space, \t, \n and \r (the only whitespace a plain text holds), where
  BERT's clean_text and a whitespace-splitting pre-tokenizer (`WHITESPACE_SPLITTERS`: none of
  them matches across whitespace) split too; the normalizer is per character;
- the model (WordPiece, ...) runs on each pre-token alone;
- added tokens are matched on the raw text (none is `normalized`, none holds whitespace), so
  one never spans two words; the cache is keyed by the raw word, case included ("[SEP]" is an
  added token, "[sep]" is not).
Where remembering does not pay, the text goes to the copy whole: a batch whose new words are
more than `MISS_SHARE` of its words (random identifiers, hashes: a miss costs about twice a
token in context), and a text with a word longer than `LONGEST_WORD` characters (never kept).
The cache holds at most `max_words` words (~170 bytes each) and starts over when full; lanes
share it (dict operations are atomic under the GIL; a full cache is replaced, never cleared
under a reader). Its cost: it runs under the GIL (~0.03 ms a completion, where the Rust
tokenizer releases it), which matters only where many tokenising threads feed a GPU
(`--word-cache 0` turns it off).
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Sequence
from typing import Any

from ..types import WORD_CACHE_WORDS

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


LONGEST_WORD = 64
"""Characters: a longer whitespace-delimited word is never kept (a hash, a base64 blob), and
its text is tokenised whole."""
MISS_SHARE = 0.4
"""A batch whose new words exceed this share of its words is tokenised whole: a new word costs
~2x its tokens in context (the joined call and the cache's own work), so remembering pays
below about half."""


class WordIds:
    """Ids of plain texts from the ids of their words, each word tokenised once (see the
    module docstring for why this is exact and when it is skipped). Build with `word_ids`."""

    def __init__(self, fast: Any, separator: tuple[str, int] | None, max_words: int) -> None:
        self.fast, self.separator, self.max_words = fast, separator, max_words
        self._words: dict[str, list[int]] = {}
        vocab = fast.get_vocab_size(with_added_tokens=True)
        self._ints = tuple(range(vocab))  # one int object per id, shared by every entry
        self.whole = 0  # texts tokenised whole (diagnosis, tests)

    def __len__(self) -> int:
        return len(self._words)

    def ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Ids of each plain text (callers route others elsewhere), in order."""
        split = [t.split() for t in texts]
        words = self._words
        new = set().union(*split).difference(words)
        if len(new) > MISS_SHARE * sum(map(len, split)):
            return self._whole(texts)
        long = {w for w in new if len(w) > LONGEST_WORD}
        if long:
            apart = [not long.isdisjoint(ws) for ws in split]
            whole = iter(self._whole([t for t, a in zip(texts, apart, strict=True) if a]))
            kept = iter(self._join([ws for ws, a in zip(split, apart, strict=True) if not a],
                                   new - long, words))  # fmt: skip
            return [next(whole) if a else next(kept) for a in apart]
        return self._join(split, new, words)

    def _join(self, split: list[list[str]], new: set[str], words: dict[str, list[int]]
              ) -> list[list[int]]:  # fmt: skip
        if new:
            learned = self._learn(list(new))
            words.update(learned)
            if len(words) > self.max_words:  # start over: a new dict, never cleared under a reader
                self._words = learned if len(learned) <= self.max_words else {}
        get = words.__getitem__
        return [list(itertools.chain.from_iterable(map(get, ws))) for ws in split]

    def _learn(self, words: list[str]) -> dict[str, list[int]]:
        """The ids of each new word: all of them in one call, between separators when the
        tokenizer has one (an added token, matched on the raw text), else one call a word."""
        ints = self._ints.__getitem__
        if self.separator is not None:
            sep_text, sep_id = self.separator
            joined = f" {sep_text} ".join(words)
            ids = self.fast.encode_batch_fast([joined], add_special_tokens=False)[0].ids
            cuts = [i for i, t in enumerate(ids) if t == sep_id]
            if len(cuts) == len(words) - 1:  # else a word holds the separator: one by one
                bounds = zip([-1, *cuts], [*cuts, len(ids)], strict=True)
                return {w: list(map(ints, ids[a + 1 : b]))
                        for w, (a, b) in zip(words, bounds, strict=True)}  # fmt: skip
        got = self.fast.encode_batch_fast(words, add_special_tokens=False)
        return {w: list(map(ints, e.ids)) for w, e in zip(words, got, strict=True)}

    def _whole(self, texts: Sequence[str]) -> list[list[int]]:
        self.whole += len(texts)
        return [e.ids for e in self.fast.encode_batch_fast(list(texts), add_special_tokens=False)]


def word_ids(fast: Any | None, max_words: int = WORD_CACHE_WORDS) -> WordIds | None:
    """A `WordIds` over `fast` (from `fast_tokenizer`) when a text's ids are its words' ids
    joined: a whitespace-splitting pre-tokenizer and no added token holding whitespace; else
    (or with `max_words` 0) None. Read off `fast` itself, the tokenizer the cache will call."""
    if fast is None or max_words <= 0:
        return None
    if type(fast.pre_tokenizer).__name__ not in WHITESPACE_SPLITTERS:
        return None
    added = sorted(fast.get_added_tokens_decoder().items())
    if any(not t.content or t.content.split() != [t.content] for _, t in added):
        return None
    special = [(t.content, i) for i, t in added if t.special and not t.single_word]
    return WordIds(fast, special[0] if special else None, max_words)


def token_ids(
    backend: Any, fast: Any | None, texts: Sequence[str], words: WordIds | None = None
) -> list[list[int]]:
    """Ids of each text without special tokens (`encode_batch_fast`: no offsets): plain texts
    through `words` (their words' ids) or `fast` when there is one, the others through
    `backend`, in order."""
    texts = list(texts)
    if fast is None:
        return [e.ids for e in backend.encode_batch_fast(texts, add_special_tokens=False)]
    easy = [plain(t) for t in texts]
    if all(easy):
        if words is not None:
            return words.ids(texts)
        return [e.ids for e in fast.encode_batch_fast(texts, add_special_tokens=False)]
    out: list[list[int]] = [[] for _ in texts]
    for tokenizer, take in ((fast, True), (backend, False)):
        at = [i for i, e in enumerate(easy) if e is take]
        if at:
            some = [texts[i] for i in at]
            if take and words is not None:
                got = words.ids(some)
            else:
                got = [e.ids for e in tokenizer.encode_batch_fast(some, add_special_tokens=False)]
            for i, ids in zip(at, got, strict=True):
                out[i] = ids
    return out

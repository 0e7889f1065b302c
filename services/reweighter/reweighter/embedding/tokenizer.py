"""The tokenizer stage: texts -> ids -> windows (pieces), a batch of pieces -> padded ids, and a
text's pieces' vectors -> its vector. It holds the model's tokenizer, never the model.

Why a stage of its own (after text-embeddings-inference's tokenization workers and infinity's
pre/core/post stages): the batcher tokenises in helper threads while the model runs in its
worker; with one object for both, every tokenising thread held the object that owns the weights,
and a change to how texts are cut (a policy, the word cache) meant reading the runtimes' code
too. Here is everything that decides a text's ids and windows:

- ids: the Rust tokenizer directly (`encode_batch_fast`, no offsets: ~17 % less CPU per text
  than the transformers wrapper), plain-ASCII texts through a lowercase-only copy where that is
  exact (ascii_ids: 20-35 % less again), and each of their words once (ascii_ids.WordIds, the
  word cache: ~4-6x less again on completions, whose words repeat);
- windows and the long-text policy: `head`, `tail`, `chunk_mean` (equal windows) or `spread`
  (k windows, head and tail always read);
- the special tokens around each window and the padding of a batch (what a backend runs);
- pooling: a text's windows' vectors, weighted by length, into one.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from reweighter.embedding import ascii_ids
from reweighter.embedding.base import Piece, weighted_mean
from reweighter.types import DEFAULT_LONG_TEXT, SPREAD_WINDOWS, LongTextPolicy

POLICIES: tuple[str, ...] = tuple(p.value for p in LongTextPolicy)


def spread_windows(ids: Sequence[int], c: int, k: int) -> list[Sequence[int]]:
    """`spread` on a text longer than k full windows: k full windows of c pieces, the first at
    the head, the last at the tail, the others evenly spaced between (starts round(i (n - c) /
    (k - 1)), i = 0..k-1). Why: the cost of a text is then k windows whatever its length (a
    4,000-token trace costs what a 1,000-token one does), while the head (the approach) and the
    tail (the answer and its justification) are always read and the middle is sampled evenly.
    A text of at most k windows gets chunk_mean's windows exactly."""
    n = len(ids)
    starts = [round(i * (n - c) / (k - 1)) for i in range(k)]
    return [ids[s : s + c] for s in starts]


def check_policy(long_text: str) -> None:
    if long_text not in POLICIES:
        raise ValueError(f"long_text must be one of {POLICIES}, got {long_text!r}")


@dataclass(frozen=True)
class TokenizerSettings:
    """The stage's four settings (flags --long-text, --long-text-windows, --max-seq-length,
    --word-cache); the model's tokenizer and window come with the backend's files."""

    long_text: LongTextPolicy = DEFAULT_LONG_TEXT
    long_text_windows: int = SPREAD_WINDOWS
    max_seq_length: int | None = None
    word_cache: int = ascii_ids.WORD_CACHE_WORDS

    def __post_init__(self) -> None:
        check_policy(self.long_text)
        if self.long_text_windows < 2:
            raise ValueError(
                "long_text_windows must be at least 2 (a head and a tail), got "
                f"{self.long_text_windows}"
            )


class TokenizerStage:
    """Texts -> pieces (one per window) and back: a `Stage` for the batcher.

    `tokenizer` is the model's transformers tokenizer; `positions` the model's position limit,
    `model_window` its configured window (sentence-transformers' max_seq_length), `normalised`
    whether the model's output is already L2-normalised (a single piece then keeps its vector).
    """

    def __init__(
        self,
        tokenizer: Any,
        settings: TokenizerSettings = TokenizerSettings(),  # noqa: B008 - frozen
        *,
        positions: int = 10**9,
        model_window: int | None = None,
        normalised: bool = True,
    ) -> None:
        self.tokenizer = tokenizer
        self.settings = settings
        self.long_text: str = str(settings.long_text)
        self.long_text_windows = int(settings.long_text_windows)
        self.normalised = normalised
        rust = getattr(tokenizer, "_tokenizer", None)
        self.ascii_tokenizer = ascii_ids.fast_tokenizer(rust) if rust is not None else None
        self.word_ids = ascii_ids.word_ids(self.ascii_tokenizer, settings.word_cache)
        window = settings.max_seq_length or model_window or positions
        if window > positions:
            raise ValueError(f"max_seq_length {window} exceeds the model's {positions} positions")
        self.window = int(window)
        self.prefix, self.suffix = self._special_tokens()
        self.content = self.window - len(self.prefix) - len(self.suffix)
        if self.content < 1:
            raise ValueError(f"max_seq_length {self.window} leaves no room for text")
        self.pad_id = tokenizer.pad_token_id or 0

    def with_long_text(self, long_text: LongTextPolicy) -> TokenizerStage:
        """The same tokenizer and word cache under another policy."""
        check_policy(long_text)
        other = copy.copy(self)
        other.long_text = str(long_text)
        return other

    @property
    def namespace(self) -> str:
        """What of the stage changes a text's vector: the policy (with spread's window count)
        and the window (part of every cache key, so a changed max_seq_length never serves stale
        vectors)."""
        policy = self.long_text
        if policy == "spread":
            policy = f"spread{self.long_text_windows}"
        return f"{policy}|{self.window}"

    def _special_tokens(self) -> tuple[list[int], list[int]]:
        """The ids the tokenizer puts around a single text ([CLS] .. [SEP] for BERT)."""
        probe = "hello"
        bare = self.tokenizer(probe, add_special_tokens=False)["input_ids"]
        full = self.tokenizer(probe, add_special_tokens=True)["input_ids"]
        for i in range(len(full) - len(bare) + 1):
            if full[i : i + len(bare)] == bare:
                return list(full[:i]), list(full[i + len(bare) :])
        raise ValueError("cannot locate the text inside the tokenizer's special-token template")

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Each text's ids, whole (no special tokens, nothing cut). The Rust tokenizer directly
        (and ascii_ids' routes) only when it truncates and pads nothing; else the wrapper's call,
        never a cut text."""
        rust = getattr(self.tokenizer, "_tokenizer", None)
        fast = getattr(rust, "encode_batch_fast", None)
        if fast is not None and rust.truncation is None and rust.padding is None:
            return ascii_ids.token_ids(rust, self.ascii_tokenizer, texts, self.word_ids)
        enc = self.tokenizer(
            list(texts),
            add_special_tokens=False,
            truncation=False,
            verbose=False,
            return_attention_mask=False,
            return_token_type_ids=False,
        )
        return enc["input_ids"]

    def windows(self, ids: Sequence[int]) -> list[Sequence[int]]:
        """A text's ids cut to the window by the policy (a short text is one window)."""
        c = self.content
        if len(ids) <= c:
            return [ids]
        if self.long_text == "head":
            return [ids[:c]]
        if self.long_text == "tail":
            return [ids[-c:]]
        # chunk_mean: equal-sized windows (not c, c, ..., remainder) so that no window is a
        # handful of tokens whose vector is noise, and windows pad well against each other.
        k = math.ceil(len(ids) / c)
        if self.long_text == "spread" and k > self.long_text_windows:
            return spread_windows(ids, c, self.long_text_windows)
        bounds = [round(i * len(ids) / k) for i in range(k + 1)]
        return [ids[bounds[i] : bounds[i + 1]] for i in range(k)]

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        extra = len(self.prefix) + len(self.suffix)
        return [sum(len(w) + extra for w in self.windows(ids)) for ids in self.token_ids(texts)]

    def split(self, texts: Sequence[str]) -> list[Piece]:
        """Tokenise once; one piece per window (a short text is one piece), weighted by length;
        a piece's `tokens` is its row's length with the special tokens."""
        extra = len(self.prefix) + len(self.suffix)
        return [
            Piece(t, len(w) + extra, w, float(max(1, len(w))))
            for t, ids in enumerate(self.token_ids(texts))
            for w in self.windows(ids)
        ]

    def padded(self, batch: Sequence[Piece]) -> tuple[np.ndarray, np.ndarray]:
        """A batch of pieces as a backend runs it: ids (the special tokens around each piece,
        padded to the longest) and the attention mask, both int64 [rows, longest]."""
        rows = [[*self.prefix, *p.data, *self.suffix] for p in batch]
        length = max(len(r) for r in rows)
        ids = np.full((len(rows), length), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(rows), length), dtype=np.int64)
        for i, r in enumerate(rows):
            ids[i, : len(r)] = r
            mask[i, : len(r)] = 1
        return ids, mask

    def pool(self, pieces: Sequence[Piece], vecs: np.ndarray) -> np.ndarray:
        """One text's pieces' vectors -> its vector: a single piece keeps its vector (normalised
        here when the model does not), several are the length-weighted mean, re-normalised."""
        if len(pieces) > 1:
            return weighted_mean(pieces, vecs)
        if self.normalised:
            return vecs[0]
        return vecs[0] / max(float(np.linalg.norm(vecs[0])), 1e-12)

"""The tokenizer stage (reweighter.embedding.tokenizer) on MiniLM's tokenizer alone, no model:
ids exactly the full tokenizer's (word cache cold and warm), windows by policy, padded rows the
tokenizer's own special-token template, and pooling."""

from __future__ import annotations

import numpy as np
import pytest

from reweighter.embedding.base import Piece
from reweighter.embedding.tokenizer import TokenizerSettings, TokenizerStage

from .minilm import TEXTS, reference_ids, tokenizer

LONG = " ".join(f"Step {i}: {i} * 7 = {7 * i}, carry the digit." for i in range(120))


def stage(**settings: object) -> TokenizerStage:
    """MiniLM's stage as the encoder builds it (window 256 of 512 positions, normalised)."""
    tok = tokenizer()
    return TokenizerStage(tok, TokenizerSettings(**settings), positions=512,  # type: ignore[arg-type]
                          model_window=256, normalised=True)  # fmt: skip


def test_the_stage_holds_a_tokenizer_and_no_model() -> None:
    import torch

    s = stage()
    assert not any(isinstance(v, torch.nn.Module) for v in vars(s).values())
    assert s.window == 256 and s.content == 254 and s.prefix == [101] and s.suffix == [102]


def test_ids_are_the_full_tokenizers_cold_and_warm() -> None:
    s = stage(long_text="chunk_mean")
    texts = [*TEXTS, LONG, "word " * 700]
    want = reference_ids(texts)
    assert s.word_ids is not None and len(s.word_ids) == 0
    assert s.token_ids(texts) == want  # cold: every word tokenised
    assert len(s.word_ids) > 20
    assert s.token_ids(texts) == want  # warm: words from the cache
    assert stage(word_cache=0).word_ids is None
    assert stage(word_cache=0).token_ids(texts) == want


def test_a_piece_is_a_window_and_its_row_is_the_tokenizers_template() -> None:
    s = stage(long_text="chunk_mean")
    tok = tokenizer()
    pieces = s.split(TEXTS)
    assert [p.text for p in pieces] == list(range(len(TEXTS)))  # short texts: one piece each
    full = tok(TEXTS, truncation=False)["input_ids"]
    assert [p.tokens for p in pieces] == [len(f) for f in full] == s.count_tokens(TEXTS)
    ids, mask = s.padded(pieces)
    assert ids.shape == mask.shape == (len(TEXTS), max(len(f) for f in full))
    for row, m, f in zip(ids, mask, full, strict=True):
        assert list(row[: len(f)]) == f and (row[len(f) :] == tok.pad_token_id).all()
        assert m.sum() == len(f)


@pytest.mark.parametrize("policy", ["head", "tail", "chunk_mean", "spread"])
def test_windows_by_policy(policy: str) -> None:
    s = stage(long_text=policy, long_text_windows=4)
    ids = list(range(254 * 6 + 10))
    wins = [list(w) for w in s.windows(ids)]
    assert all(len(w) <= 254 for w in wins)
    if policy == "head":
        assert wins == [ids[:254]]
    elif policy == "tail":
        assert wins == [ids[-254:]]
    elif policy == "chunk_mean":  # 7 equal windows covering every id once
        assert len(wins) == 7 and sum(wins, []) == ids
    else:  # 4 full windows, head and tail
        assert len(wins) == 4 and wins[0] == ids[:254] and wins[-1] == ids[-254:]
    assert s.windows(ids[:254]) == [ids[:254]]  # a text that fits is one window


def test_policy_views_share_the_tokenizer_and_word_cache() -> None:
    s = stage(long_text="spread")
    tail = s.with_long_text("tail")
    assert tail.word_ids is s.word_ids and tail.tokenizer is s.tokenizer
    assert (s.namespace, tail.namespace) == ("spread4|256", "tail|256")
    with pytest.raises(ValueError, match="long_text"):
        s.with_long_text("middle")  # type: ignore[arg-type]


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="long_text_windows"):
        TokenizerSettings(long_text_windows=1)
    with pytest.raises(ValueError, match="long_text"):
        TokenizerSettings(long_text="middle")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="exceeds the model's 512 positions"):
        stage(max_seq_length=1000)
    assert stage(max_seq_length=32).content == 30


def test_pool_keeps_one_piece_and_weights_several() -> None:
    rng = np.random.default_rng(0)
    v = rng.normal(size=(2, 8)).astype(np.float32)
    one = [Piece(0, 5, [1, 2, 3])]
    assert stage().pool(one, v[:1]) is not None
    np.testing.assert_array_equal(stage().pool(one, v[:1]), v[0])  # normalised model: as is
    tok = tokenizer()
    raw = TokenizerStage(tok, positions=512, model_window=256, normalised=False)
    np.testing.assert_allclose(raw.pool(one, v[:1]), v[0] / np.linalg.norm(v[0]), rtol=1e-6)
    two = [Piece(0, 5, [1, 2, 3], 3.0), Piece(0, 3, [4], 1.0)]
    mean = 3 * v[0].astype(np.float64) + v[1]
    np.testing.assert_allclose(stage().pool(two, v), mean / np.linalg.norm(mean), rtol=1e-6)

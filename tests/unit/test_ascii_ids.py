"""The plain-ASCII tokenizer path (reweighter.embedding.ascii_ids) gives exactly the model
tokenizer's ids: a fuzz of plain texts, the texts it must route to the full tokenizer, and the
tokenizers it must not touch. The real MiniLM tokenizer throughout."""

from __future__ import annotations

import json
import random
import string

import pytest
from test_embedding_support import bundled_encoder

from reweighter.embedding import ascii_ids
from reweighter.embedding.ascii_ids import fast_tokenizer, plain, token_ids


@pytest.fixture(scope="module")
def backend():  # noqa: ANN201 - a tokenizers.Tokenizer
    return bundled_encoder()._tokenizer._tokenizer


def full_ids(backend, texts: list[str]) -> list[list[int]]:  # noqa: ANN001
    return [e.ids for e in backend.encode_batch_fast(texts, add_special_tokens=False)]


def fuzz_texts(n: int, seed: int = 3) -> list[str]:
    """Plain texts built to stress the normaliser's cases: upper case, digits, every ASCII
    punctuation mark, tabs and line breaks, special-token lookalikes, words past WordPiece's
    100-character limit, runs of whitespace, and the empty text."""
    rng = random.Random(seed)
    pieces = [
        *string.ascii_letters, *string.digits, *string.punctuation, " ", "  ", "\t", "\n", "\r\n",
        "[CLS]", "[cls]", "[UNK]", "[SEP]x", "##ing", "Let's", "x^2+1=0", "\\frac{1}{2}",
        "Answer:", "QED.", "x" * 101, "Supercalifragilistic",
    ]  # fmt: skip
    words = ["the", "The", "THE", "solve", "Solving", "step", "42", "3.14", "isn't", "e.g."]
    out = [""]
    for _ in range(n):
        k = rng.randint(1, 60)
        out.append("".join(rng.choice(pieces if rng.random() < 0.5 else words) + (
            " " if rng.random() < 0.5 else "") for _ in range(k)))  # fmt: skip
    return out


def test_plain_texts_give_the_full_tokenizers_ids(backend) -> None:  # noqa: ANN001
    fast = fast_tokenizer(backend)
    assert fast is not None, "MiniLM's BertNormalizer tokenizer must get the fast path"
    texts = fuzz_texts(3000)
    assert all(plain(t) for t in texts)
    assert token_ids(backend, fast, texts) == full_ids(backend, texts)
    # and every printable ASCII character alone and beside a letter
    chars = [chr(c) for c in range(0x20, 0x7F)] + ["\t", "\n", "\r"]
    singles = chars + [f"A{c}b" for c in chars] + [f"{c}{c}Z{c}" for c in chars]
    assert token_ids(backend, fast, singles) == full_ids(backend, singles)


def test_the_routing_is_what_makes_it_exact(backend) -> None:  # noqa: ANN001
    """The lowercase-only copy alone is wrong on accents (no stripping) and control characters
    (not dropped): those texts must take the full tokenizer, and they do."""
    fast = fast_tokenizer(backend)
    odd = ["Café au lait", "naïve", "数学 is math", "a\x00b", "bell\x07", "vt\x0bff\x0c",
           "nbsp\u00a0here", "del\x7f", "emoji 🤖"]  # fmt: skip
    assert not any(plain(t) for t in odd)
    assert full_ids(fast, odd) != full_ids(backend, odd)  # the copy alone would differ
    assert token_ids(backend, fast, odd) == full_ids(backend, odd)


def test_a_mixed_batch_keeps_its_order(backend) -> None:  # noqa: ANN001
    fast = fast_tokenizer(backend)
    texts = ["Plain One", "Café", "", "plain\ttwo", "naïve", "THREE"]
    assert token_ids(backend, fast, texts) == full_ids(backend, texts)


def test_other_normalisers_get_no_fast_path(backend) -> None:  # noqa: ANN001
    from tokenizers import Tokenizer, normalizers

    other = Tokenizer.from_str(backend.to_str())
    other.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.Lowercase()])
    assert fast_tokenizer(other) is None
    assert token_ids(other, None, ["Plain text"]) == full_ids(other, ["Plain text"])
    # an added token matched on the normalised text: \t \n \r might be spaces there
    spec = json.loads(backend.to_str())
    spec["added_tokens"][0]["normalized"] = True
    assert fast_tokenizer(Tokenizer.from_str(json.dumps(spec))) is None


def test_the_encoder_tokenises_through_it() -> None:
    enc = bundled_encoder()
    assert enc._ascii_tokenizer is not None
    texts = ["The Answer is 42.", "Ünïcödé", "x\ty\nz " * 200]
    assert enc._token_ids(texts) == full_ids(enc._tokenizer._tokenizer, texts)
    assert ascii_ids.plain(texts[0]) and not ascii_ids.plain(texts[1])


def test_line_breaks_need_a_whitespace_splitting_pre_tokenizer(backend) -> None:  # noqa: ANN001
    """clean_text turns \\t \\n \\r into spaces: exact only where the pre-tokenizer splits on
    any whitespace alike. With another one (Metaspace keeps what it splits on) no fast path,
    unless clean_text is off (then the normaliser only lowercases plain text, whatever follows)."""
    from tokenizers import Tokenizer

    spec = json.loads(backend.to_str())
    spec["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always",
                             "split": True}  # fmt: skip
    assert fast_tokenizer(Tokenizer.from_str(json.dumps(spec))) is None
    spec["normalizer"]["clean_text"] = False
    other = Tokenizer.from_str(json.dumps(spec))
    fast = fast_tokenizer(other)
    assert fast is not None
    texts = fuzz_texts(300, seed=11)
    assert token_ids(other, fast, texts) == full_ids(other, texts)

"""The plain-ASCII tokenizer path (reweighter.embedding.ascii_ids) gives exactly the model
tokenizer's ids: a fuzz of plain texts, the texts it must route to the full tokenizer, and the
tokenizers it must not touch. The real MiniLM tokenizer throughout."""

from __future__ import annotations

import json
import random
import string

import pytest

from reweighter.embedding import ascii_ids
from reweighter.embedding.ascii_ids import fast_tokenizer, plain, token_ids

from .support import bundled_encoder


@pytest.fixture(scope="module")
def backend():  # noqa: ANN201 - a tokenizers.Tokenizer
    return bundled_encoder().stage.tokenizer._tokenizer


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
    assert enc.stage.ascii_tokenizer is not None
    texts = ["The Answer is 42.", "Ünïcödé", "x\ty\nz " * 200]
    assert enc.stage.token_ids(texts) == full_ids(enc.stage.tokenizer._tokenizer, texts)
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


# -- words remembered (ascii_ids.WordIds) ---------------------------------------------------


def repetitive_texts(n: int, seed: int) -> list[str]:
    """Plain texts whose words repeat (as completions' do), each with a few of the fuzz's odd
    pieces: the word cache serves them (the fuzz alone is mostly tokenised whole)."""
    rng = random.Random(seed)
    common = ["the", "The", "step", "so", "=", "x^2+1=0", "isn't", "Answer:", "42.", "[SEP]",
              "[sep]", "a[SEP]b", "##ing", "\\frac{1}{2}", "e.g.", "(3)", "QED."]  # fmt: skip
    odd = fuzz_texts(n, seed=seed)
    return [" ".join(rng.choice(common) for _ in range(rng.randint(0, 80))) + rng.choice(
        [" ", "\n", "\t", "\r\n", ""]) + odd[i] for i in range(n)]  # fmt: skip


def batched(words, backend, fast, texts: list[str], size: int = 16) -> list[list[int]]:  # noqa: ANN001
    out: list[list[int]] = []
    for i in range(0, len(texts), size):
        out += token_ids(backend, fast, texts[i : i + size], words)
    return out


def test_remembered_words_give_the_full_tokenizers_ids(backend) -> None:  # noqa: ANN001
    """Cold and warm, on texts whose words repeat, with words that hold the separator (an added
    token) or other added tokens, odd whitespace, and words past both length limits."""
    fast = fast_tokenizer(backend)
    words = ascii_ids.word_ids(fast)
    assert words is not None and words.separator is not None
    texts = repetitive_texts(2000, seed=5) + fuzz_texts(300, seed=9)
    want = full_ids(backend, texts)
    assert batched(words, backend, fast, texts) == want  # cold: learned batch by batch
    learned, whole = len(words), words.whole
    assert learned > 100 and whole < len(texts) // 2, "the cache must serve most of them"
    assert batched(words, backend, fast, texts) == want  # warm
    assert len(words) == learned
    # a word past LONGEST_WORD is never kept; its text is tokenised whole, the others are not
    long_word = "y" * (ascii_ids.LONGEST_WORD + 1)
    mixed = ["the step so", f"the {long_word} so", "so the step", "x" * 101]
    before = words.whole
    assert token_ids(backend, fast, mixed, words) == full_ids(backend, mixed)
    assert words.whole - before == 2
    assert long_word not in words._words and "x" * 101 not in words._words


def test_words_that_do_not_repeat_are_tokenised_whole(backend) -> None:  # noqa: ANN001
    """Random identifiers: remembering would cost more than it saves (MISS_SHARE), so the texts
    go to the tokenizer whole and nothing is kept."""
    rng = random.Random(2)
    fast = fast_tokenizer(backend)
    words = ascii_ids.word_ids(fast)
    texts = [" ".join("".join(rng.choices(string.ascii_lowercase + string.digits, k=8))
                      for _ in range(100)) for _ in range(32)]  # fmt: skip
    assert batched(words, backend, fast, texts) == full_ids(backend, texts)
    assert words.whole == len(texts) and len(words) == 0


def test_the_cache_is_bounded(backend) -> None:  # noqa: ANN001
    fast = fast_tokenizer(backend)
    words = ascii_ids.word_ids(fast, max_words=50)
    texts = repetitive_texts(400, seed=8)
    for i in range(0, len(texts), 8):
        assert token_ids(backend, fast, texts[i : i + 8], words) == full_ids(
            backend, texts[i : i + 8]
        )
        assert len(words) <= 50


def test_threads_share_one_cache(backend) -> None:  # noqa: ANN001
    """The lanes' threads share one cache (and its start-overs, with a small bound)."""
    from concurrent.futures import ThreadPoolExecutor

    fast = fast_tokenizer(backend)
    words = ascii_ids.word_ids(fast, max_words=300)
    texts = repetitive_texts(1600, seed=13)
    want = full_ids(backend, texts)
    chunks = [texts[i : i + 16] for i in range(0, len(texts), 16)]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda c: token_ids(backend, fast, c, words), chunks))
    assert [ids for c in got for ids in c] == want


def test_no_word_cache_where_words_do_not_compose(backend) -> None:  # noqa: ANN001
    """Off with max_words 0, and None where a text's ids need not be its words' ids: a
    pre-tokenizer that does not split on whitespace, an added token holding a space."""
    from tokenizers import AddedToken, Tokenizer

    fast = fast_tokenizer(backend)
    assert ascii_ids.word_ids(fast, max_words=0) is None
    assert ascii_ids.word_ids(None) is None
    spec = json.loads(backend.to_str())
    spec["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always",
                             "split": True}  # fmt: skip
    spec["normalizer"]["clean_text"] = False
    other = Tokenizer.from_str(json.dumps(spec))
    assert (
        fast_tokenizer(other) is not None
        and ascii_ids.word_ids(fast_tokenizer(other)) is None
    )
    spaced = Tokenizer.from_str(backend.to_str())
    spaced.add_special_tokens([AddedToken("<end of text>", normalized=False)])
    assert ascii_ids.word_ids(fast_tokenizer(spaced)) is None


def test_the_encoder_remembers_words_unless_told_not_to() -> None:
    enc = bundled_encoder()
    assert enc.stage.word_ids is not None
    texts = ["The answer is 42, so the answer is 42."] * 3 + ["Ünïcödé the answer"]
    assert enc.stage.token_ids(texts) == full_ids(enc.stage.tokenizer._tokenizer, texts)
    assert len(enc.stage.word_ids) >= 5
    from reweighter.embedding.sentence_transformers import SentenceTransformerEncoder

    off = SentenceTransformerEncoder.load(device="cpu", word_cache=0)
    assert off.stage.word_ids is None
    assert off.stage.token_ids(texts) == enc.stage.token_ids(texts)

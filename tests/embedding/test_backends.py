"""The backends (reweighter.embedding.backends): each runs a padded batch of ids to vectors behind
the one protocol, chosen from the settings; the eager one on the bundled MiniLM gives the vectors
of the full transformers tokenizer and model (minilm.reference); the stage and the backend
together give the same ids and vectors; bf16, ONNX int8 and AOTInductor on the near-free encoder
(reweighter.embedding.tiny: one layer of width 32, MiniLM's tokenizer) stay within their bounds.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest

from reweighter.embedding.backends import (
    AotBackend,
    Backend,
    BackendSettings,
    EagerBackend,
    OnnxInt8Backend,
    load_weights,
    select_backend,
)
from reweighter.embedding.backends.base import cpu_has_native_bf16
from reweighter.embedding.sentence_transformers import SentenceTransformerEncoder
from reweighter.embedding.tokenizer import TokenizerStage

from .minilm import TEXTS, reference, reference_ids, tokenizer

LONG = " ".join(f"Step {i}: {i} * 7 = {7 * i}, carry the digit." for i in range(120))


@functools.cache
def eager() -> EagerBackend:
    return EagerBackend(None, "cpu", "fp32")


@pytest.fixture(scope="module", autouse=True)
def _models() -> None:
    """MiniLM (ours and the reference's) loaded in setup, not inside a timed test call."""
    eager()
    reference(["warm"])


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    from reweighter.embedding.tiny import build_tiny_encoder

    return str(build_tiny_encoder(tmp_path_factory.mktemp("tiny") / "encoder"))


def padded(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The full tokenizer's batch ([CLS] .. [SEP], padded), as int64 arrays."""
    batch = tokenizer()(texts, padding=True, truncation=True, max_length=256, return_tensors="np")
    return batch["input_ids"].astype(np.int64), batch["attention_mask"].astype(np.int64)


def test_eager_forward_is_the_models_own() -> None:
    import torch

    e = eager()
    assert isinstance(e, Backend)
    assert (e.dim, e.device, e.precision, e.positions, e.max_seq_length) == (384, "cpu", "fp32",
                                                                            512, 256)  # fmt: skip
    with torch.inference_mode():
        got = e.forward(*padded(TEXTS))
    assert got.dtype == torch.float32 and tuple(got.shape) == (len(TEXTS), 384)
    np.testing.assert_allclose(got.numpy(), reference(TEXTS), atol=2e-6)


def test_stage_and_backend_give_the_references_ids_and_vectors() -> None:
    """The encoder's path (stage: ids, windows, rows; backend: forward; stage: pool) against the
    full tokenizer and model: the same ids; the same vectors for texts within one window; for a
    longer one under `head`, the reference's truncation."""
    e = eager()
    stage = TokenizerStage(e.tokenizer, positions=e.positions, model_window=e.max_seq_length)
    enc = SentenceTransformerEncoder(stage, e)
    assert enc.stage is stage and enc.backend is e and enc.stage is not enc.backend
    texts = [*TEXTS, LONG]
    assert stage.token_ids(texts) == reference_ids(texts)
    np.testing.assert_allclose(enc.encode(TEXTS), reference(TEXTS), atol=2e-6)
    head = enc.with_long_text("head")
    assert len(reference_ids([LONG])[0]) > 254
    np.testing.assert_allclose(head.encode([LONG]), reference([LONG]), atol=2e-6)


def test_the_settings_choose_the_runtime(tiny: str, tmp_path: Path) -> None:
    off = BackendSettings(tiny, "cpu", "fp32", "off")
    weights = load_weights(off)
    assert select_backend(weights, off, 256) is weights  # compile off: eager itself
    int8 = BackendSettings(tiny, "cpu", "int8", "auto", precision_cache_dir=str(tmp_path))
    fp32_weights = load_weights(int8)
    assert fp32_weights.precision == "fp32"  # int8 is exported from fp32
    backend = select_backend(fp32_weights, int8, 256)
    assert isinstance(backend, OnnxInt8Backend) and isinstance(backend, Backend)
    assert backend.precision == "int8" and backend.ort.path.is_relative_to(tmp_path)
    assert BackendSettings(compile=True).compile == "on"  # the flag's old bool form
    with pytest.raises(ValueError, match="compile=on compiles the torch model"):
        BackendSettings(precision="int8", compile="on")
    with pytest.raises(ValueError, match="compile must be"):
        BackendSettings(compile="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="precision=fp16 needs a CUDA device"):
        load_weights(BackendSettings(tiny, "cpu", "fp16"))


def test_onnx_int8_stays_within_its_bound(tiny: str, tmp_path: Path) -> None:
    """int8 moves similarities by ~0.01 (BENCHMARKS.md, precision): the same bound here."""
    import torch

    fp32 = EagerBackend(tiny, "cpu", "fp32")
    int8 = OnnxInt8Backend(fp32, tmp_path)
    ids, mask = padded([*TEXTS, LONG])
    with torch.inference_mode():
        a, b = int8.forward(ids, mask).numpy(), fp32.forward(ids, mask).numpy()
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)  # normalised after
    assert np.abs(a @ a.T - b @ b.T).max() < 0.01
    assert 0 < np.abs(a - b).max() < 0.02  # quantised, and close


def test_bf16_on_cpu_runs_where_native_else_is_refused(tiny: str) -> None:
    import torch

    if not cpu_has_native_bf16():
        with pytest.raises(ValueError, match="precision=bf16 on CPU needs native bf16"):
            EagerBackend(tiny, "cpu", "bf16")
        return
    half, full = EagerBackend(tiny, "cpu", "bf16"), EagerBackend(tiny, "cpu", "fp32")
    assert {p.dtype for p in half.model.parameters()} == {torch.bfloat16}
    ids, mask = padded([*TEXTS, LONG])
    with torch.inference_mode():
        a, b = half.forward(ids, mask).numpy(), full.forward(ids, mask).numpy()
    assert a.dtype == np.float32 and np.abs(a @ a.T - b @ b.T).max() < 0.05


@pytest.mark.process  # the package is built in a child process (~80 s on 2 cores)
def test_aot_backend_swaps_in_the_package_with_the_eager_vectors(tiny: str, tmp_path: Path) -> None:
    import torch

    weights = EagerBackend(tiny, "cpu", "fp32")
    ids, mask = padded([*TEXTS, LONG])
    with torch.inference_mode():
        before = weights.forward(ids, mask).numpy()
    backend = AotBackend(weights, 256, tmp_path)
    assert isinstance(backend, Backend) and backend.compile_state == "off"
    backend.compile()
    assert backend.compile_state == "compiled" and backend.compile_source == "built"
    with torch.inference_mode():
        after = backend.forward(ids, mask).numpy()
    np.testing.assert_allclose(after, before, atol=1e-6)
    assert backend.recompile_fallbacks == 0
    on = BackendSettings(tiny, "cpu", "fp32", "on", compile_cache_dir=str(tmp_path))
    again = select_backend(EagerBackend(tiny, "cpu", "fp32"), on, 256)
    assert isinstance(again, AotBackend) and again.compile_source == "cache"

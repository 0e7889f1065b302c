"""The compiled encoder's package (reweighter.embedding.aot): built in a child process, kept on
disk under its key, reused across restarts, and rebuilt (never trusted) when stale or damaged.

On the near-free encoder (reweighter.embedding.tiny: one layer of width 32 behind MiniLM's
tokenizer), so that a build takes seconds; the mechanism is the model's own on MiniLM (the
background-compile test in test_embedding.py) and on CUDA (test_cuda.py).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest

from reweighter.embedding import aot
from reweighter.embedding.backends import AotBackend
from reweighter.embedding.backends.aot import artefact_key
from reweighter.embedding.sentence_transformers import SentenceTransformerEncoder
from reweighter.embedding.tiny import build_tiny_encoder

# Each test builds (or loads) a package through `python -m reweighter.embedding.aot_child`.
pytestmark = pytest.mark.process

TEXTS = ["x", "Step 1: 3 + 4 = 7.", "Step 2: 7 x 6 = 42, so the answer is 42. " * 12,
         "a long trace " * 300]  # fmt: skip


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(build_tiny_encoder(tmp_path_factory.mktemp("tiny") / "encoder"))


@pytest.fixture(scope="module")
def eager(tiny: str) -> np.ndarray:
    return SentenceTransformerEncoder.load(tiny, device="cpu", compile="off").encode(TEXTS)


def compiled(tiny: str, cache: Path) -> SentenceTransformerEncoder:
    return SentenceTransformerEncoder.load(
        tiny, device="cpu", compile="on", compile_cache_dir=str(cache)
    )


def test_built_once_then_reused_with_the_eager_vectors(
    tiny: str, eager: np.ndarray, tmp_path: Path
) -> None:
    first = compiled(tiny, tmp_path)
    assert first.compile_state == "compiled" and first.backend.compile_source == "built"
    pkg, meta = aot.paths(tmp_path, first.backend.artefact_key())
    assert pkg.exists() and json.loads(meta.read_text())["key"]["torch"]
    np.testing.assert_allclose(first.encode(TEXTS), eager, atol=1e-6)
    assert first.backend.recompile_fallbacks == 0  # every batch shape ran the one package
    built = pkg.stat().st_mtime_ns
    again = compiled(tiny, tmp_path)  # a restart: the package is loaded, not rebuilt
    assert again.backend.compile_source == "cache" and pkg.stat().st_mtime_ns == built
    np.testing.assert_allclose(again.encode(TEXTS), eager, atol=1e-6)


def test_a_stale_or_damaged_package_is_rebuilt_not_trusted(
    tiny: str, eager: np.ndarray, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first = compiled(tiny, tmp_path)
    pkg, meta = aot.paths(tmp_path, first.backend.artefact_key())
    # stale: the recorded key is another torch's (a package copied between machines, say)
    recorded = json.loads(meta.read_text())
    recorded["key"]["torch"] = "0.0.0"
    meta.write_text(json.dumps(recorded))
    with caplog.at_level(logging.WARNING):
        stale = compiled(tiny, tmp_path)
    assert stale.backend.compile_source == "built" and "another key" in caplog.text
    np.testing.assert_allclose(stale.encode(TEXTS), eager, atol=1e-6)
    # damaged: the package's bytes no longer match the recorded sha256
    with pkg.open("r+b") as f:
        f.seek(pkg.stat().st_size // 2)
        f.write(b"\0" * 64)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        damaged = compiled(tiny, tmp_path)
    assert damaged.backend.compile_source == "built" and "sha256 mismatch" in caplog.text
    np.testing.assert_allclose(damaged.encode(TEXTS), eager, atol=1e-6)


def test_the_key_names_what_the_package_depends_on(tiny: str, tmp_path: Path) -> None:
    enc = SentenceTransformerEncoder.load(tiny, device="cpu", compile="off")
    key = artefact_key(enc.backend, enc.window)  # type: ignore[arg-type]
    assert key.model_id == enc.model_id and key.window == 256 and key.type_ids
    assert key.device.startswith("cpu|") and key.precision == "fp32"
    # Another window, or other weights at the same path, is another package.
    short = SentenceTransformerEncoder.load(tiny, device="cpu", compile="off", max_seq_length=128)
    assert artefact_key(short.backend, short.window).digest() != key.digest()  # type: ignore[arg-type]
    import torch

    with torch.no_grad():
        next(enc.model[0].auto_model.parameters()).add_(1e-3)
    assert artefact_key(enc.backend, enc.window).digest() != key.digest()  # type: ignore[arg-type]


def test_background_build_serves_eager_meanwhile(
    tiny: str, eager: np.ndarray, tmp_path: Path
) -> None:
    """compile="auto"'s path (CUDA, AVX-512): eager answers while the child builds; the package
    is swapped in when it is loaded and checked."""
    loaded = SentenceTransformerEncoder.load(tiny, device="cpu", compile="off")
    backend = AotBackend(loaded.backend, loaded.window, tmp_path)  # type: ignore[arg-type]
    enc = SentenceTransformerEncoder(loaded.stage, backend)
    thread = backend.compile_in_background()
    assert enc.compile_state == "compiling"
    np.testing.assert_array_equal(enc.encode(TEXTS), eager)  # served now, eager
    thread.join(300)
    assert enc.compile_state == "compiled" and backend.compiled
    np.testing.assert_allclose(enc.encode(TEXTS), eager, atol=1e-6)


def test_a_package_that_cannot_be_built_leaves_the_encoder_eager(
    tiny: str, eager: np.ndarray, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No C++ compiler (a slim image) makes the child fail: logged, served eager, not fatal."""
    monkeypatch.setenv("CXX", "/nonexistent/c++")
    monkeypatch.setenv("CC", "/nonexistent/cc")
    monkeypatch.setenv("PATH", "/nonexistent")
    enc = compiled(tiny, tmp_path / "nothing-here")
    assert enc.compile_state == "failed" and not enc.backend.compiled
    np.testing.assert_array_equal(enc.encode(TEXTS), eager)

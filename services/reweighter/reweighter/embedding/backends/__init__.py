"""One backend per runtime behind one protocol (`Backend`: ids in, vectors out), chosen from the
settings here: eager torch (fp32, fp16, bf16: backends.eager), AOTInductor (backends.aot), ONNX
int8 (backends.onnx). The model's weights are loaded once, by the eager backend, which the other
two wrap.
"""

from __future__ import annotations

from reweighter.embedding.backends.aot import AotBackend
from reweighter.embedding.backends.base import (
    Backend,
    BackendSettings,
    auto_compiles,
    resolve_device,
    resolve_precision,
)
from reweighter.embedding.backends.eager import EagerBackend
from reweighter.embedding.backends.onnx import OnnxInt8Backend

__all__ = [
    "AotBackend",
    "Backend",
    "BackendSettings",
    "EagerBackend",
    "OnnxInt8Backend",
    "load_weights",
    "select_backend",
]


def load_weights(settings: BackendSettings) -> EagerBackend:
    """The model, loaded for the runtime the settings name: in their precision, or in fp32 for
    int8 (its artefact is exported from fp32). A precision the device cannot run is refused
    here, before anything loads."""
    device = resolve_device(settings.device)
    precision = resolve_precision(settings.precision, device)
    return EagerBackend(settings.model, device, "fp32" if precision == "int8" else precision)  # type: ignore[arg-type]


def select_backend(eager: EagerBackend, settings: BackendSettings, window: int) -> Backend:
    """The runtime the settings name, over the loaded weights: ONNX int8 (precision int8), the
    AOTInductor package (compile on: built now; auto where it measured faster: built in the
    background, eager meanwhile), else eager. `window` is the longest sequence a pass holds
    (the tokenizer stage's), which the compiled package is exported for."""
    if resolve_precision(settings.precision, eager.device) == "int8":
        return OnnxInt8Backend(eager, settings.precision_cache_dir)
    if settings.compile == "on":
        backend = AotBackend(eager, window, settings.compile_cache_dir)
        backend.compile()
        return backend
    if settings.compile == "auto" and auto_compiles(eager.device, eager.precision):
        backend = AotBackend(eager, window, settings.compile_cache_dir)
        backend.compile_in_background()
        return backend
    return eager

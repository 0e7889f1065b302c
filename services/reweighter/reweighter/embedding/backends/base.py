"""What every backend is (`Backend`), the settings that choose one (`BackendSettings`), and the
device and precision rules they share.

A backend runs the model on a batch of ids: `forward(ids, mask)` -> one vector per row (the
model's own pooling and normalisation included). It owns the device and the precision; it never
sees a text (the tokenizer stage, reweighter.embedding.tokenizer, made the ids) and never plans
a batch (the encoder cuts pieces into passes by its budget). One module per runtime, as
text-embeddings-inference's backends and infinity's abstract backend class keep them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

import numpy as np
import torch

BUNDLED_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
CompileMode = Literal["auto", "on", "off"]
COMPILE_MODES: tuple[str, ...] = ("auto", "on", "off")
Precision = Literal["auto", "fp32", "int8", "fp16", "bf16"]
PRECISIONS: tuple[str, ...] = ("auto", "fp32", "int8", "fp16", "bf16")
HALF = {"fp16": torch.float16, "bf16": torch.bfloat16}


@runtime_checkable
class Backend(Protocol):
    """One runtime of the model: ids in, vectors out."""

    dim: int
    """The width of a vector."""
    device: str
    """Where it runs (cpu, cuda, cuda:1)."""
    precision: str
    """What it computes in: fp32, fp16, bf16 (torch) or int8 (ONNX Runtime)."""
    model_id: str
    """Stable identifier of the weights (part of every cache key)."""

    def forward(self, ids: np.ndarray, mask: np.ndarray) -> torch.Tensor:
        """[rows, length] int64 ids and attention mask -> [rows, dim] float32 vectors (on the
        backend's device); called under `torch.inference_mode()`."""
        ...


@dataclass(frozen=True)
class BackendSettings:
    """The six settings that choose and load a backend (flags --model, --device, --precision,
    --compile, --precision-cache-dir, --compile-cache-dir)."""

    model: str | None = None
    """A sentence-transformers model name or folder; None: the bundled MiniLM."""
    device: str = "auto"
    precision: Precision = "auto"
    compile: CompileMode | bool = "off"
    """auto | on | off: the AOTInductor backend (reweighter.embedding.backends.aot)."""
    precision_cache_dir: str | None = None
    """Where the int8 ONNX artefact is kept (reweighter.embedding.quantize)."""
    compile_cache_dir: str | None = None
    """Where the AOTInductor package is kept (reweighter.embedding.aot)."""

    def __post_init__(self) -> None:
        mode = {True: "on", False: "off"}.get(self.compile, self.compile)  # type: ignore[call-overload]
        if mode not in COMPILE_MODES:
            raise ValueError(f"compile must be 'auto', 'on' or 'off', got {self.compile!r}")
        if self.precision == "int8" and mode == "on":
            raise ValueError(
                "compile=on compiles the torch model, but precision=int8 runs ONNX Runtime: "
                "set compile to auto or off with precision=int8"
            )
        object.__setattr__(self, "compile", mode)


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def cpu_flags() -> frozenset[str]:
    """This CPU's feature flags (/proc/cpuinfo; empty where there is none)."""
    try:
        with open("/proc/cpuinfo") as f:
            return frozenset(next((ln for ln in f if ln.startswith("flags")), "").split()[2:])
    except OSError:
        return frozenset()


def cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bf16 in hardware (AVX512-BF16 or AMX): elsewhere torch
    emulates bf16 and it is slower than fp32."""
    flags = cpu_flags()
    return "avx512_bf16" in flags or "amx_bf16" in flags


def resolve_precision(precision: str, device: str) -> str:
    """`auto` -> fp16 on CUDA, fp32 on CPU; a precision the device cannot run is refused here, at
    start, with the setting's name: int8 is ONNX Runtime's CPU kernels, fp16 is CUDA's, bf16
    runs on CUDA and on CPUs with native bf16 (AVX512-BF16/AMX), where it measured within the
    accuracy bounds that int8 misses (BENCHMARKS.md, precision)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    cuda = resolve_device(device).startswith("cuda")
    if precision == "auto":
        return "fp16" if cuda else "fp32"
    if precision == "int8" and cuda:
        raise ValueError(
            f"precision=int8 runs on CPU only (ONNX Runtime's int8 kernels), but device="
            f"{device!r} resolves to CUDA: use precision fp16 or bf16 there, or device=cpu"
        )
    if precision == "fp16" and not cuda:
        raise ValueError(
            f"precision=fp16 needs a CUDA device, but device={device!r} resolves to CPU: use "
            "precision fp32 (exact), bf16 (CPUs with AVX512-BF16/AMX) or int8 on CPU"
        )
    if precision == "bf16" and not cuda and not cpu_has_native_bf16():
        raise ValueError(
            f"precision=bf16 on CPU needs native bf16 (AVX512-BF16 or AMX), which this CPU "
            f"lacks (device={device!r}): use precision fp32 or int8 here"
        )
    return precision


def auto_compiles(device: str, precision: str = "fp32") -> bool:
    """Whether `compile="auto"` compiles (in the background) on `device`: on CUDA, and on CPUs
    with AVX-512 at fp32. Paired outside-in runs (BENCHMARKS.md Q): the compiled forward served
    1.19x [1.07, 1.34] the eager one on a 2-core AMD Zen 4 (AVX-512) and 1.05x [0.98, 1.13] on
    an Intel Xeon with AVX-512/AMX, but 0.88x on a 2-core AMD Zen 3 (AVX2 only): there `auto`
    stays eager. Reduced precision on CPU was measured eager only, so it stays eager;
    `compile="on"` still compiles anywhere.
    """
    resolved = resolve_device(device)
    if resolved.startswith("cuda"):
        return True
    return resolved == "cpu" and precision == "fp32" and cpu_runs_avx512()


def cpu_runs_avx512() -> bool:
    """Whether torch runs its AVX-512 kernels here: the CPU has them and torch uses them
    (`ATEN_CPU_CAPABILITY=avx2` caps both torch's kernels and Inductor's generated code at
    AVX2, so such a process is treated as the AVX2-only CPU it then behaves like)."""
    if "avx512f" not in cpu_flags():
        return False
    try:
        return torch.backends.cpu.get_cpu_capability().upper().startswith("AVX512")
    except (AttributeError, RuntimeError):  # a torch without the query: trust the CPU
        return True

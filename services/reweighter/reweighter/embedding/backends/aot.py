"""The AOTInductor backend: the eager backend, with its transformer's forward swapped for a
compiled package (reweighter.embedding.aot) once the package is loaded and checked.

Why a package built in a child (`aot.build_in_child`): the compile never holds this process's
interpreter (the old in-process `torch.compile` starved the eager path on a GPU for ~35 s), and
a restart reuses it (~0.1 s) instead of compiling again. `compile="on"` builds before serving;
`auto` serves eager at once and swaps the package in when it is warm (on CUDA and AVX-512 CPUs:
backends.base.auto_compiles). One-sequence batches, and any call the package was not exported
for, stay eager; a package whose output differs from the eager forward on a check batch is not
trusted (logged, served eager); a failed build (no C++ compiler) leaves the backend eager.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers.modeling_outputs import BaseModelOutput

from reweighter.embedding import aot
from reweighter.embedding.backends.eager import EagerBackend

log = logging.getLogger(__name__)

# The keyword arguments sentence-transformers passes the transformer's forward, all of which
# the compiled package takes (anything else runs eager).
_COMPILED_KWARGS = frozenset({"input_ids", "attention_mask", "token_type_ids", "return_dict"})


class AotBackend:
    """`eager` with an AOTInductor package for sequences of at most `window` tokens, kept in
    `cache_dir` (default: aot.default_cache_dir()). Built with `compile()` (blocking) or
    `compile_in_background()`; until then, and whenever the package cannot run a call, eager."""

    runtime = "aot"

    def __init__(self, eager: EagerBackend, window: int, cache_dir: str | Path | None = None):
        self.eager = eager
        self.model_id, self.dim, self.device = eager.model_id, eager.dim, eager.device
        self.precision = eager.precision
        self.window = int(window)
        self.cache_dir = Path(cache_dir) if cache_dir else aot.default_cache_dir()
        self.compiled = False
        self.compile_state = "off"  # off | compiling | compiled | failed
        self.compile_seconds: float | None = None
        self.compile_source: str | None = None  # cache | built
        self.recompile_fallbacks = 0  # compiled-path batches that ran eager instead
        self.thread: threading.Thread | None = None

    def forward(self, ids: np.ndarray, mask: np.ndarray) -> torch.Tensor:
        return self.eager.forward(ids, mask)  # the transformer's forward is the swapped one

    def child_options(self) -> dict[str, Any]:
        """What the child that builds the package loads: this model, as resolved."""
        e = self.eager
        return {"model": e.source, "device": e.device, "max_seq_length": self.window,
                "precision": e.precision}  # fmt: skip

    def artefact_key(self) -> aot.ArtefactKey:
        """What this backend's compiled package depends on (aot.ArtefactKey)."""
        return artefact_key(self.eager, self.window)

    def compile(self) -> None:
        """Compile now (blocking), then swap the compiled forward in."""
        self.compile_state = "compiling"
        self._build()

    def compile_in_background(self) -> threading.Thread:
        """Serve eager now; compile in a daemon thread and swap the compiled forward in when it
        is warm. Requests never wait for the compile, and none runs a half-compiled model."""
        self.compile_state = "compiling"
        self.thread = threading.Thread(target=self._build, name="reweighter-compile", daemon=True)
        self.thread.start()
        return self.thread

    def _build(self) -> None:
        """Load the package from the cache, building it first in a child when it is missing or
        stale; check it against the eager forward; then swap it in."""
        t0 = time.monotonic()
        try:
            key = self.artefact_key()
            if aot.valid(self.cache_dir, key):
                self.compile_source = "cache"
            else:
                aot.build_in_child(self.child_options(), self.cache_dir)
                self.compile_source = "built"
                if not aot.valid(self.cache_dir, key):
                    raise RuntimeError("the child's package does not match this backend's key")
            runner = aot.load(self.cache_dir, key, self.device)
            self._check(runner)
        except Exception as e:  # no C++ compiler, an unexportable model: serve eager, not fail
            self.compile_state = "failed"
            log.warning("compiling the encoder failed (%s: %s); serving eager",
                        type(e).__name__, str(e)[:2000])  # fmt: skip
            return
        self._swap_in(runner)
        self.compiled = True
        self.compile_state = "compiled"
        self.compile_seconds = time.monotonic() - t0
        how = "loaded from the cache" if self.compile_source == "cache" else "built"
        log.info("compiled encoder in service after %.1f s (%s)", self.compile_seconds, how)

    def _swap_in(self, runner: Callable[..., Any]) -> None:
        """The transformer's forward becomes the package's for the calls it was exported for
        (2..aot.MAX_ROWS rows of at least 2 tokens, the keyword arguments it takes), eager for
        any other; the sentence-transformers modules around it run unchanged."""
        transformer = self.eager.transformer
        eager = transformer.forward
        types = self.eager.type_ids

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

        transformer.forward = forward  # atomic: a forward pass in flight finishes eager

    def _check(self, runner: Callable[..., Any]) -> None:
        """The package's hidden states on a check batch (several lengths, padding) against the
        eager forward's: a mismatch beyond the precision's tolerance is refused."""
        tok = self.eager.tokenizer
        pad = tok.pad_token_id or 0
        word = tok("reasoning", add_special_tokens=False)["input_ids"] or [pad]
        lengths = (42, 9, 132, 5)
        ids_np = np.full((len(lengths), max(lengths)), pad, dtype=np.int64)
        mask_np = np.zeros_like(ids_np)
        for i, n in enumerate(lengths):
            ids_np[i, :n], mask_np[i, :n] = (word * n)[:n], 1
        dev = self.eager.model.device
        ids, mask = torch.from_numpy(ids_np).to(dev), torch.from_numpy(mask_np).to(dev)
        inputs = [ids, mask] + ([torch.zeros_like(ids)] if self.eager.type_ids else [])
        kwargs = {"token_type_ids": inputs[2]} if self.eager.type_ids else {}
        with torch.inference_mode(), self.eager.autocast():
            ref = self.eager.transformer(input_ids=ids, attention_mask=mask, **kwargs)
            got = runner(*inputs)
        keep = mask.bool()
        err = (got.float()[keep] - ref.last_hidden_state.float()[keep]).abs().max().item()
        tol = 1e-3 if self.precision == "fp32" else 5e-2
        if not err <= tol:
            raise RuntimeError(f"the compiled forward differs from eager by {err:.3g} (> {tol})")


def artefact_key(eager: EagerBackend, window: int) -> aot.ArtefactKey:
    """The key of `eager`'s package for sequences of at most `window` tokens (the child, which
    loads an eager backend only, computes the same)."""
    return aot.ArtefactKey(
        model_id=eager.model_id,
        weights_sha256=aot.weights_sha256(eager.transformer),
        torch=torch.__version__,
        device=aot.device_descriptor(eager.device),
        precision=eager.precision,
        window=int(window),
        type_ids=eager.type_ids,
    )

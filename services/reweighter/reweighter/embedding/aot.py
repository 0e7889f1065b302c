"""The encoder's compiled forward, built ahead of time in a child process and kept on disk.

Why: the old background `torch.compile` ran in the server's own process and held the
interpreter the eager path needs to feed the GPU: on a lent H200 the service served 0.22x plain
`encode(32)` for the ~35 s its compile took (BENCHMARKS.md, GPU rows), and every restart paid
the compile again. Here the transformer is exported (`torch.export`, dynamic batch and sequence
length) and compiled by AOTInductor into one `.pt2` package **in a child process**
(`python -m reweighter.embedding.aot_child`), while the server keeps serving eager at full
speed; the package then loads in ~0.1 s and is swapped in. A restart with the same key loads it
before ready: no slow window, no compile.

The key (`ArtefactKey`) names everything the package depends on: the model id and a digest of
its weights, the torch version, the device (CUDA name, capability and CUDA version; or the CPU
capability torch dispatches to), the precision, the window, whether the model takes token type
ids, and this module's format. It is the file name, and it is written beside the package with
the package's sha256: a package whose recorded key or digest does not match is stale or
damaged, and is rebuilt, never loaded.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

log = logging.getLogger(__name__)

AOT_FORMAT = 1
"""Bump when the exported signature or the build options change: old packages become stale."""
MAX_ROWS = 4096
"""The largest batch the package accepts; larger (never formed by default) runs eager."""


@dataclasses.dataclass(frozen=True)
class ArtefactKey:
    """What a compiled package depends on; its digest names the file."""

    model_id: str
    weights_sha256: str
    torch: str
    device: str
    precision: str
    window: int
    type_ids: bool
    format: int = AOT_FORMAT

    def digest(self) -> str:
        blob = json.dumps(dataclasses.asdict(self), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:24]


def default_cache_dir() -> Path:
    """`$XDG_CACHE_HOME/reweighter/compiled` (else `~/.cache/reweighter/compiled`): where
    packages are kept when `Settings.compile_cache_dir` is unset."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "reweighter" / "compiled"


def weights_sha256(module: torch.nn.Module) -> str:
    """A digest of every parameter and buffer (names, shapes, dtypes, bytes): a checkpoint
    changed at the same path gives another key."""
    h = hashlib.sha256()
    for name, t in sorted(module.state_dict().items()):
        h.update(f"{name}|{tuple(t.shape)}|{t.dtype}".encode())
        h.update(t.detach().contiguous().cpu().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def device_descriptor(device: str) -> str:
    """The device as the generated code depends on it."""
    if device.startswith("cuda"):
        idx = torch.device(device).index or 0
        major, minor = torch.cuda.get_device_capability(idx)
        return f"cuda|{torch.cuda.get_device_name(idx)}|sm{major}{minor}|cuda{torch.version.cuda}"
    return f"cpu|{torch.backends.cpu.get_cpu_capability()}"


def paths(cache_dir: Path, key: ArtefactKey) -> tuple[Path, Path]:
    """(package, its key and digest) for `key` under `cache_dir`."""
    stem = cache_dir / f"encoder-{key.digest()}"
    return stem.with_suffix(".pt2"), stem.with_suffix(".json")


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def valid(cache_dir: Path, key: ArtefactKey) -> bool:
    """Whether a package for `key` exists whose recorded key and sha256 both match."""
    pkg, meta = paths(cache_dir, key)
    try:
        recorded = json.loads(meta.read_text())
    except (OSError, ValueError):
        return False
    if recorded.get("key") != dataclasses.asdict(key):
        log.warning("compiled encoder %s was built for another key: rebuilding", pkg.name)
        return False
    if not pkg.exists() or recorded.get("sha256") != _file_sha256(pkg):
        log.warning("compiled encoder %s is damaged (sha256 mismatch): rebuilding", pkg.name)
        return False
    return True


class _Exported(torch.nn.Module):
    """The transformer as exported: ids and mask -> last hidden state."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return _hidden(self.model(input_ids=input_ids, attention_mask=attention_mask))


class _ExportedTypes(_Exported):
    """... and with token type ids, for models that take them (BERT)."""

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,  # type: ignore[override]
                token_type_ids: torch.Tensor) -> torch.Tensor:  # fmt: skip
        return _hidden(self.model(input_ids=input_ids, attention_mask=attention_mask,
                                  token_type_ids=token_type_ids))  # fmt: skip


def _hidden(out: Any) -> torch.Tensor:
    return out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]


def build(model: torch.nn.Module, key: ArtefactKey, cache_dir: Path, device: str) -> Path:
    """Export `model` (the loaded transformer) with dynamic batch and length, compile it with
    AOTInductor (frozen weights), and write the package and its key atomically."""
    import torch._inductor

    cache_dir.mkdir(parents=True, exist_ok=True)
    pkg, meta = paths(cache_dir, key)
    wrapped = (_ExportedTypes if key.type_ids else _Exported)(model).eval()
    rows, length = 4, min(64, key.window)
    ids = torch.randint(1000, 2000, (rows, length), device=device)
    args = (ids, torch.ones_like(ids)) + ((torch.zeros_like(ids),) if key.type_ids else ())
    batch = torch.export.Dim("batch", min=2, max=MAX_ROWS)
    seq = torch.export.Dim("seq", min=2, max=key.window)
    with torch.no_grad():
        exported = torch.export.export(
            wrapped, args, dynamic_shapes=tuple({0: batch, 1: seq} for _ in args)
        )
    fd, tmp = tempfile.mkstemp(dir=cache_dir, prefix=".building-", suffix=".pt2")
    os.close(fd)
    try:
        torch._inductor.aoti_compile_and_package(
            exported, package_path=tmp, inductor_configs={"freezing": True}
        )
        os.chmod(tmp, 0o644)  # a cache shared by replicas or users is readable by them
        digest = _file_sha256(Path(tmp))
        os.replace(tmp, pkg)
    finally:
        Path(tmp).unlink(missing_ok=True)
    body = json.dumps({"key": dataclasses.asdict(key), "sha256": digest}, indent=1)
    meta.with_suffix(".json.tmp").write_text(body)
    os.replace(meta.with_suffix(".json.tmp"), meta)
    return pkg


def load(cache_dir: Path, key: ArtefactKey, device: str) -> Callable[..., Any]:
    """The compiled forward of a valid package (check `valid` first)."""
    import torch._inductor

    pkg, _ = paths(cache_dir, key)
    idx = torch.device(device).index if device.startswith("cuda") else None
    return torch._inductor.aoti_load_package(str(pkg), device_index=idx if idx is not None else -1)


def build_in_child(options: dict[str, Any], cache_dir: Path, timeout: float = 1800.0) -> None:
    """Build the package in a child process (the server's interpreter stays free for the eager
    path); raises with the child's last output when it fails."""
    cmd = [sys.executable, "-m", "reweighter.embedding.aot_child", "--cache-dir", str(cache_dir),
           "--options", json.dumps(options)]  # fmt: skip
    t0 = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(
            f"compiling the encoder failed (exit {done.returncode}): {done.stderr[-2000:]}"
        )
    log.info("compiled encoder built in a child process in %.1f s", time.monotonic() - t0)

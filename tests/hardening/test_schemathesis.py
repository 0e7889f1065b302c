"""Schema fuzzing against /openapi.json: positive and negative cases for every operation, a
fixed example budget, derandomized (no example database). No 5xx, and every error in the
documented shape {error: {message, field, type}} (OpenAI's {error: {message, type, param, code}}
on the OpenAI routes).

The operations are driven through schemathesis' strategies with plain Hypothesis rather than
its pytest plugin (whose lazy-fixture loader does not run under pytest 9)."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode

from reweighter.tenancy import DEADLINE_HEADER
from reweighter.wire.openai import OPENAI_PATHS, OpenAIErrorOut

from .conftest import AUTH, Served, error_shape

EXAMPLES = 15  # per operation and mode: keeps the whole fuzz under ~30 s here


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_server_errors_and_documented_error_shape(keyed: Served, mode: GenerationMode) -> None:
    schema = schemathesis.openapi.from_url(keyed.url + "/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {op.path for op in operations} >= {"/v1/reweight", "/v1/embed", "/healthz"}
    if mode is GenerationMode.NEGATIVE:  # only operations that take input can get it wrong
        operations = [op for op in operations if op.method.upper() == "POST"]
    seen: list[int] = []
    for operation in operations:

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            derandomize=True,
            database=None,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        def check(case: schemathesis.Case) -> None:
            response = case.call(base_url=keyed.url, headers=AUTH, timeout=60)
            seen.append(response.status_code)
            # a generated x-request-timeout (documented: any positive number of seconds) may be
            # too short to compute in: its documented answer is 504 DeadlineExceeded
            deadline = DEADLINE_HEADER in {k.lower() for k in (case.headers or {})}
            if not (deadline and response.status_code == 504):
                assert response.status_code < 500, (case.path, case.body, response.text[:500])
            if response.status_code >= 400 and case.path in OPENAI_PATHS:
                body = OpenAIErrorOut.model_validate(response.json())  # OpenAI's error shape
                assert body.error.message, response.text
            elif response.status_code >= 400 and case.path != "/readyz":
                error_shape(response.json())

        check()
    assert len(seen) >= len(operations)
    if mode is GenerationMode.NEGATIVE:
        assert any(400 <= s < 500 for s in seen)

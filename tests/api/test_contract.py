"""The document is the contract: a property-based test generated from the service's own
/openapi.json (schemathesis), for every operation, with positive cases (what the document
allows must be taken) and negative ones (what it forbids must be refused), the API key given,
against a real service on loopback. Every check schemathesis has runs: no 5xx, every status
documented on its operation, every answer matching its documented schema and content type,
negative data refused, positive data taken. The one allowance: a positive case refused by a
rule the document cannot state (one list as long as another, a vector not all zeros, a
method's parameters tied to the method) is taken as refused only when docs/service.md's table
"What the document cannot say" names that rule and its answer; any other refusal of schema-valid
data, and any undocumented status, fails. So a schema widened past what the service takes, or
a status the service gives and the document does not list, fails here (both shown in the
issue's note, by a local edit).

Also: the document validates as OpenAPI 3.1 (its structure against the 3.1 meta-schema, every
schema in it against JSON Schema 2020-12)."""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
import schemathesis
from conftest import ServedApp, loopback
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode
from schemathesis.config import SchemathesisConfig
from schemathesis.specs.openapi.checks import positive_data_acceptance
from schemathesis.specs.openapi.definitions import OPENAPI_31

from reweighter.api.http.app import create_app
from reweighter.engine import ReweightEngine
from reweighter.service import BackgroundService
from reweighter.tenancy import DEADLINE_HEADER

pytestmark = pytest.mark.server  # a service of its own, ~2 minutes of generated calls

DOC = Path(__file__).resolve().parents[2] / "docs" / "service.md"
KEY = "contract-key"
TOKEN = "contract-token"
EXAMPLES = int(os.environ.get("REWEIGHTER_CONTRACT_EXAMPLES", "12"))
"""Per operation and mode: bounded, derandomized, no example database (a deeper run: set
REWEIGHTER_CONTRACT_EXAMPLES)."""
ROW = re.compile(r"^\| (?P<rule>[^|]+?) \| (?P<status>\d{3}) \| `(?P<message>[^`]+)` \|$", re.M)

REFUSALS = ["400", "401", "404", "405", "409", "413", "422", "429"]
"""What a negative case may get: schemathesis' own list (400, 401, 404, 405, 409, 422, 429)
and 413, the document's answer for a body, a count or a length over the configured limits
(a limit is the service's setting, not the schema's: a negative case that is also too big is
refused for its size first)."""
CONFIG = SchemathesisConfig.from_dict(
    {
        # the key, for the document's bearer scheme: sent with every case, and left out by
        # schemathesis' ignored_auth check, which then wants a 401
        "auth": {"openapi": {"bearer": {"bearer": KEY}}},
        "checks": {
            "negative_data_rejection": {"expected-statuses": REFUSALS},
            # 413: a configured limit (max_chars, max_completions...), documented on every
            # operation; schema-valid data may be over it
            "positive_data_acceptance": {
                "expected-statuses": ["2xx", "401", "404", "409", "413", "429", "503"]
            },
        },
    }
)


def unstated_rules(text: str | None = None) -> list[tuple[str, int, re.Pattern[str]]]:
    """docs/service.md's table "What the document cannot say": (rule, status, message)."""
    text = DOC.read_text() if text is None else text
    section = text.split("### What the document cannot say", 1)[1].split("\n#", 1)[0]
    rows = [
        (m["rule"], int(m["status"]), re.compile(m["message"].replace("\\|", "|")))
        for m in ROW.finditer(section)
    ]  # a "|" in a pattern is written "\|" in the table
    assert rows, "the table of rules the document cannot say is empty or unreadable"
    return rows


@pytest.fixture(scope="module")
def served(engine: ReweightEngine) -> Iterator[BackgroundService]:
    settings = loopback(
        api_key=KEY,
        openrlhf_token=TOKEN,
        # a generated member whose group never fills waits this long, not the default's minutes
        assembly_timeout_s=0.3,
        assembly_max_timeout_s=0.3,
    )
    with BackgroundService(settings, engine) as svc:
        yield svc


def _error_message(response: Any) -> str:
    try:
        return str(response.json()["error"]["message"])
    except Exception:
        return response.text[:300]


def stated(response: Any, rules: list[tuple[str, int, re.Pattern[str]]]) -> str | None:
    """The rule of the table that explains `response`'s refusal, if one does."""
    message = _error_message(response)
    for rule, status, pattern in rules:
        if response.status_code == status and pattern.search(message):
            return rule
    return None


def run_contract(
    url: str,
    modes: list[GenerationMode],
    examples: int = EXAMPLES,
    paths: set[str] | None = None,
) -> list[str]:
    """Every operation of `url`'s /openapi.json (or those of `paths`), `examples` cases per
    mode, with every check; the failures, one line each (empty: the service is its document)."""
    rules = unstated_rules()
    schema = schemathesis.openapi.from_url(url + "/openapi.json", config=CONFIG)
    operations = [result.ok() for result in schema.get_all_operations()]
    operations = [op for op in operations if paths is None or op.path in paths]
    failures: list[str] = []
    for mode in modes:
        for operation in operations:
            if mode is GenerationMode.NEGATIVE and not _takes_input(operation):
                continue  # nothing to get wrong
            failures += _fuzz(url, operation, mode, rules, examples)
    return failures


def _fuzz(
    url: str,
    operation: Any,
    mode: GenerationMode,
    rules: list[tuple[str, int, re.Pattern[str]]],
    examples: int,
) -> list[str]:
    """One operation's cases of one mode, each sent and checked; its failures."""
    failures: list[str] = []
    positive = mode is GenerationMode.POSITIVE

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    def check(case: schemathesis.Case) -> None:
        if positive and "token" in (case.path_parameters or {}):
            case.path_parameters["token"] = TOKEN  # the right secret: a wrong one is a 401
        response = case.call(base_url=url, timeout=60)
        try:
            case.validate_response(response, excluded_checks=[positive_data_acceptance])
            if positive:
                case.validate_response(response, checks=[positive_data_acceptance])
        except BaseExceptionGroup as e:  # schemathesis' FailureGroup
            kinds = {type(f).__name__ for f in e.exceptions}
            if positive and kinds <= {"RejectedPositiveData"} and stated(response, rules):
                return  # refused by a rule the table names, with its answer
            if kinds <= {"ServerError"} and _deadline_passed(case, response):
                return
            lines = [x for x in str(e).splitlines() if x.strip()][:12]
            where = f"{mode.value} {operation.method.upper()} {operation.path}: "
            failures.append(where + " / ".join(lines))

    check()
    return failures


def _deadline_passed(case: schemathesis.Case, response: Any) -> bool:
    """A 504 DeadlineExceeded for a case that sent an `x-request-timeout` (any positive number
    of seconds, as documented, so 1e-12 too): its documented answer, not a server error."""
    sent = DEADLINE_HEADER in {k.lower() for k in (case.headers or {})}
    return sent and response.status_code == 504 and "deadline" in _error_message(response)


def _takes_input(operation: Any) -> bool:
    return operation.method.upper() == "POST" or bool(operation.definition.raw.get("parameters"))


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_the_service_is_its_document(served: BackgroundService, mode: GenerationMode) -> None:
    failures = run_contract(served.http_url, [mode])
    assert not failures, "\n".join(failures)


def test_drift_fails_the_contract(engine: ReweightEngine) -> None:
    """The test above can fail: served with a document widened past what the service takes
    (`normalize` without its `const: true`) and one that leaves out a status the service gives
    (404 of /v1/embeddings for a model it does not serve), the contract finds each."""
    app = create_app(engine, loopback(api_key=KEY))
    doc = copy.deepcopy(app.openapi())
    del doc["components"]["schemas"]["EmbedIn"]["properties"]["normalize"]["const"]
    del doc["paths"]["/v1/embeddings"]["post"]["responses"]["404"]
    app.openapi_schema = doc  # what /openapi.json serves
    with ServedApp(app) as served:
        failures = run_contract(  # more cases than the suite's: two small operations
            served.url(""), [GenerationMode.POSITIVE], 50, paths={"/v1/embed", "/v1/embeddings"}
        )
    found = {line.split(":", 1)[0]: line for line in failures}
    assert "Schema-valid request rejected" in found["positive POST /v1/embed"], failures
    assert "only normalize=true is supported" in found["positive POST /v1/embed"]
    assert "Undocumented status code" in found["positive POST /v1/embeddings"], failures


def test_the_document_is_openapi_3_1(served: BackgroundService) -> None:
    """Its structure against the official OpenAPI 3.1 schema (schemas/v3.1/schema.yaml of the
    OpenAPI Specification, as schemathesis bundles it), and every schema in it, the components'
    and the parameters', against JSON Schema 2020-12 (3.1's dialect)."""
    doc = httpx.get(served.http_url + "/openapi.json", timeout=30).json()
    assert doc["openapi"].startswith("3.1.")
    jsonschema.Draft202012Validator(OPENAPI_31).validate(doc)
    schemas = list(doc["components"]["schemas"].values())
    schemas += [p["schema"] for ops in doc["paths"].values() for op in ops.values()
                for p in op.get("parameters", [])]  # fmt: skip
    for schema in schemas:
        jsonschema.Draft202012Validator.check_schema(schema)
    assert len(schemas) > 20


def test_the_meta_schema_refuses_a_broken_document() -> None:
    """The check above can fail: a response without its description, a parameter without
    `in`, are refused."""
    broken = {"openapi": "3.1.0", "info": {"title": "t", "version": "1"},
              "paths": {"/x": {"get": {"parameters": [{"name": "n"}],
                                       "responses": {"200": {}}}}}}  # fmt: skip
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(OPENAPI_31).validate(broken)

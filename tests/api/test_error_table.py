"""docs/service.md's table of errors is the code's: every error class of `reweighter.errors`
has one row, with its HTTP status, its gRPC code and whether the clients retry it, read from
the classes and the retry policy themselves; and the trailing metadata keys it names are the
ones the gRPC transport writes."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from reweighter import errors
from reweighter.client.retry import retryable
from reweighter.wire.grpc import ERROR_FIELD_KEY, ERROR_TYPE_KEY

DOC = Path(__file__).resolve().parents[2] / "docs" / "service.md"
ROW = re.compile(r"^\| `(\w+)` \| (\d{3})[^|]* \| `(\w+)`[^|]* \| (yes|no) \|", re.M)


def test_every_error_has_its_row_and_the_row_is_the_code() -> None:
    text = DOC.read_text()
    rows = {m[1]: (int(m[2]), m[3], m[4] == "yes") for m in ROW.finditer(text)}
    classes = {
        name: cls
        for name, cls in inspect.getmembers(errors, inspect.isclass)
        if issubclass(cls, errors.ReweighterError) and cls is not errors.ReweighterError
    }
    assert set(rows) == set(classes), (set(rows) ^ set(classes))
    for name, cls in classes.items():
        exc = cls("x")
        assert rows[name] == (exc.http_status, exc.grpc_code, retryable(exc)), name
    assert f"`{ERROR_TYPE_KEY}`" in text and f"`{ERROR_FIELD_KEY}`" in text

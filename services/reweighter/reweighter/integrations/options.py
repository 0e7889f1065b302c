"""The one options model of every integration: how to reach the Reweighter and what to ask it.

TRL's `reweighted(...)`, the trainer's `reweighter:` config section, verl's
`reward.reweighter` keys and the REWEIGHTER_* environment that slime and SkyRL read are all
`ReweighterOptions`: one set of names, defaults and documentation. Every option is applied by
the backend it is given to, or refused with a message naming it (`connect` refuses a
`long_text` for a network backend, whose policy is the server's flag, and an `api_key` or a
`timeout_s` for the in-process one, which has no network); none is dropped.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..client import DEFAULT_URL, Reweighter, connect
from ..types import DEFAULT_METHOD, AdvantageKind, LongTextPolicy

ENV_PREFIX = "REWEIGHTER_"


class ReweighterOptions(BaseModel):
    """How an integration reaches the Reweighter (`url`, `api_key`, `timeout_s`, `long_text`)
    and what it asks for (`method`, `params`, `advantages`)."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(
        DEFAULT_URL,
        description="a connect() URL: http(s)://host:port, grpc(s)://host:port, or inprocess "
        "(the engine in this process)",
    )
    api_key: str | None = Field(None, description="bearer token of a network backend")
    timeout_s: float | None = Field(
        None, gt=0, description="seconds per call over the network (None: the client default)"
    )
    long_text: LongTextPolicy | None = Field(
        None, description="in process only: how long completions are embedded (a server's is "
        "its own --long-text flag)"
    )
    method: str = Field(DEFAULT_METHOD.value, description="a method of the catalogue")
    params: dict[str, Any] = Field(default_factory=dict, description="the method's parameters")
    advantages: AdvantageKind = Field(
        AdvantageKind.NONE, description="advantages to compute after reweighting"
    )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ReweighterOptions:
        """From REWEIGHTER_<FIELD> variables (REWEIGHTER_URL, REWEIGHTER_PARAMS as JSON, ...);
        an unset or empty one keeps the default. A bad value is refused naming its variable."""
        env = os.environ if env is None else env
        given: dict[str, Any] = {}
        for name in cls.model_fields:
            raw = env.get(ENV_PREFIX + name.upper())
            if not raw:
                continue
            if name == "params":
                try:
                    raw = json.loads(raw)
                except json.JSONDecodeError as e:
                    raise ValueError(f"{ENV_PREFIX}PARAMS is not JSON: {raw!r}") from e
            given[name] = raw
        return cls.parse(given, lambda name: ENV_PREFIX + name.upper())

    @classmethod
    def parse(cls, given: Mapping[str, Any], name_of: Any = None) -> ReweighterOptions:
        """From a mapping (a stack's config section); None values keep the default. Errors name
        the key as the user wrote it (`name_of(field)`, default: the field's name)."""
        try:
            return cls.model_validate({k: v for k, v in given.items() if v is not None})
        except ValidationError as e:
            first = e.errors()[0]
            key = ".".join(str(p) for p in first["loc"])
            shown = name_of(key) if name_of else key
            raise ValueError(f"{shown}: {first['msg']} (got {first.get('input')!r})") from None

    def connect(self) -> Reweighter:
        """A client for these options; an option the backend cannot apply is refused."""
        settings = {"long_text": self.long_text} if self.long_text is not None else None
        return connect(self.url, api_key=self.api_key, timeout_s=self.timeout_s, settings=settings)

    def request(self) -> dict[str, Any]:
        """What every request asks for: method, params, advantages."""
        return {"method": self.method, "params": dict(self.params), "advantages": self.advantages}

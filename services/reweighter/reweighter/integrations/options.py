"""The one options model of every integration: how to reach the Reweighter and what to ask it.

TRL's `reweighted(...)`, the trainer's `reweighter:` config section, verl's
`reward.reweighter` keys, SkyRL's mixin attributes (`reweighter_<option>`) and the
REWEIGHTER_* environment that slime and SkyRL read are all `ReweighterOptions`: one set of
names, defaults, validation and documentation. Every option is applied by the backend and the
stack it is given to, or refused with a message naming it, never dropped:

- the backend (`check_backend`, at parse time, for every stack alike): a `long_text` for a
  network backend, whose policy is the server's flag, and an `api_key` or a `timeout_s` for
  the in-process one, which has no network;
- the stack (`UNSUPPORTED`): what a stack decides itself, e.g. the advantages of verl, slime
  and SkyRL, which compute their own from the reweighted rewards.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..client import DEFAULT_URL, Reweighter, connect
from ..client.connect import INPROCESS
from ..types import DEFAULT_METHOD, AdvantageKind, LongTextPolicy

ENV_PREFIX = "REWEIGHTER_"
NameOf = Callable[[str], str]
"""An option's name as the user wrote it (`reward.reweighter.url`, `REWEIGHTER_URL`, ...)."""


def _advantages(why: str) -> dict[str, str]:
    return {"advantages": why, "advantage_params": why}


UNSUPPORTED: dict[str, dict[str, str]] = {
    "trl": {},
    "trainer": {},
    "verl": _advantages(
        "verl computes its own advantages from the reweighted rewards "
        "(algorithm.adv_estimator); leave it unset"
    ),
    "slime": _advantages(
        "slime picks the service's estimator from its own flags (--advantage-estimator, "
        "--rewards-normalization, --grpo-std-normalization); leave it unset"
    ),
    "skyrl": _advantages(
        "SkyRL computes its own advantages from the reweighted rewards "
        "(trainer.algorithm.advantage_estimator); leave it unset"
    ),
}
"""Per stack, the options it cannot honour and why: refused naming them when set to anything
but their default. Every other option is applied (tests/integrations/test_options.py holds
each stack to this table)."""


CONNECTION_FIELDS = ("api_key", "timeout_s", "long_text")
"""The options that set up a client from `url` (the rest are each request's: `request()`)."""


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
    advantage_params: dict[str, Any] = Field(
        default_factory=dict,
        description='the estimator\'s parameters: {"k": 4} with advantages: pass_at_k '
        "(checked by the service: a 422 names advantage_params.k)",
    )

    @classmethod
    def from_env(
        cls, env: Mapping[str, str] | None = None, *, stack: str | None = None
    ) -> ReweighterOptions:
        """From REWEIGHTER_<FIELD> variables (REWEIGHTER_URL, REWEIGHTER_PARAMS as JSON, ...);
        an unset or empty one keeps the default. A bad value is refused naming its variable."""
        env = os.environ if env is None else env
        given: dict[str, Any] = {}
        for name in cls.model_fields:
            raw = env.get(ENV_PREFIX + name.upper())
            if not raw:
                continue
            if name in ("params", "advantage_params"):
                try:
                    raw = json.loads(raw)
                except json.JSONDecodeError as e:
                    raise ValueError(f"{ENV_PREFIX}{name.upper()} is not JSON: {raw!r}") from e
            given[name] = raw
        return cls.parse(given, lambda name: ENV_PREFIX + name.upper(), stack=stack)

    @classmethod
    def parse(
        cls, given: Mapping[str, Any], name_of: NameOf | None = None, *, stack: str | None = None
    ) -> ReweighterOptions:
        """From a mapping (a stack's config section); None values keep the default. Errors name
        the key as the user wrote it (`name_of(field)`, default: the field's name): a bad value,
        an unknown key, an option `stack` cannot honour (UNSUPPORTED), an option the backend
        cannot apply (`check_backend`)."""
        shown = name_of or str
        given = {k: v for k, v in given.items() if v is not None}
        for key, why in UNSUPPORTED[stack].items() if stack else ():
            if key in given and given[key] != cls.model_fields[key].get_default(
                call_default_factory=True
            ):
                raise ValueError(f"{shown(key)}: {why} (got {given[key]!r})")
        try:
            options = cls.model_validate(given)
        except ValidationError as e:
            first = e.errors()[0]
            key = ".".join(str(p) for p in first["loc"])
            raise ValueError(f"{shown(key)}: {first['msg']} (got {first.get('input')!r})") from None
        options.check_backend(shown)
        return options

    @property
    def target(self) -> str:
        """The connect() URL these options reach."""
        return self.url

    def check_backend(self, name_of: NameOf = str) -> None:
        """Refuse, naming it, an option the backend of `target` cannot apply: in process there
        is no network (api_key, timeout_s); a server embeds by its own flags (long_text)."""
        if self.target in (INPROCESS, "inprocess://"):
            for name in ("api_key", "timeout_s"):
                if getattr(self, name) is not None:
                    raise ValueError(
                        f"{name_of(name)}: the in-process backend has no network; leave it unset"
                    )
        elif self.long_text is not None:
            raise ValueError(
                f"{name_of('long_text')}: applies in process only; {self.target} is a server, "
                "set up by its own flags (`reweighter serve --long-text`, REWEIGHTER_LONG_TEXT)"
            )

    def connect(self) -> Reweighter:
        """A client for these options (checked by `check_backend` when parsed)."""
        settings = {"long_text": self.long_text} if self.long_text is not None else None
        return connect(
            self.target, api_key=self.api_key, timeout_s=self.timeout_s, settings=settings
        )

    def request(self) -> dict[str, Any]:
        """What every request asks for: method, params, advantages and their parameters."""
        return {
            "method": self.method,
            "params": dict(self.params),
            "advantages": self.advantages,
            "advantage_params": dict(self.advantage_params),
        }

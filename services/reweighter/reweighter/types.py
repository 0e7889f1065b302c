"""The engine's vocabulary: request and result types every transport converts to and from, and
the three closed sets of names (method, advantage kind, long-text policy), defined here once.

The names are `StrEnum`s: they compare equal to their plain strings ("dra" == Method.DRA), so
callers may pass either, pydantic and the OpenAPI schema list their values, and the engine turns
a string into a member exactly once (`parse_name`), naming the field when it is not one.
"""

from __future__ import annotations

import functools
import json
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from enum import StrEnum
from typing import Any, ClassVar, Literal, NotRequired, TypeVar

from typing_extensions import TypedDict  # pydantic (FastAPI's response_model) needs it on 3.11

from .errors import InvalidInput


class Method(StrEnum):
    """The built-in reweighting methods, as typed constants. The set of methods the service
    accepts is the catalogue (reweighter.methods.catalog), which lists these and any added one:
    code judges a name against the catalogue, never against this enum."""

    DRA = "dra"
    MMR = "mmr"
    DARLING = "darling"
    OUTCOME_UCB = "outcome_ucb"
    NONE = "none"


DEFAULT_METHOD = Method.DRA


class AdvantageKind(StrEnum):
    """The built-in advantage estimators, as typed constants. The set the service accepts is
    their catalogue (reweighter.methods.estimators), which lists these and any added one: code
    judges a name against the catalogue, never against this enum."""

    GRPO = "grpo"
    DR_GRPO = "dr_grpo"
    PASS_AT_K = "pass_at_k"
    NONE = "none"


class LongTextPolicy(StrEnum):
    """How texts longer than the encoder window are embedded (docs/embedding.md)."""

    HEAD = "head"
    TAIL = "tail"
    CHUNK_MEAN = "chunk_mean"
    SPREAD = "spread"


DEFAULT_LONG_TEXT = LongTextPolicy.SPREAD
"""The one default, for the service's setting and the encoder class alike (they once differed:
the class embedded every window while the service spread them): chosen by the class-agreement
check and the cost model in docs/embedding.md."""

SPREAD_WINDOWS = 4
"""`spread`'s default: the most windows one text costs, whatever its length."""

WORD_CACHE_WORDS = 1 << 17
"""The default bound of the tokenising lanes' word cache (Settings.word_cache,
reweighter.embedding.ascii_ids.WordIds): ~22 MB at ~170 bytes a word."""


E = TypeVar("E", bound=StrEnum)

MemberRole = Literal["key", "shared", "payload", "call"]
"""What a MemberSubmission field is to group assembly, said once where the field is defined;
the member path is derived from it (reweighter.assembly):
- "key": names the group or the member (group_id, member_id);
- "shared": every member of a round gives the same: stored in the round's GroupMeta, a member
  that differs is a 409 naming the field, and the rebuilt request carries it (a ReweightRequest
  field of that name, a Group field of that name, or group_size: the group's length);
- "payload": the member's own value, one item of the Group list it names (`group_list`: the
  plural, reward -> rewards; quality keeps its name): stored with the member and covered by its
  digests, so a resend that differs in it is a 409 naming the field;
- "call": how this call waits (timeout_s, reuse_ids): no part of the result."""


def parse_name(kind: type[E], value: object, field: str, what: str) -> E:
    """`value` as a member of `kind`, or InvalidInput naming `field` and the known names."""
    try:
        return kind(value)
    except ValueError:
        known = ", ".join(m.value for m in kind)
        raise InvalidInput(f"unknown {what} {value!r}; known: {known}", field=field) from None


def wire(
    doc: str,
    default: Any = MISSING,
    *,
    factory: Callable[[], Any] | None = None,
    non_empty: bool = False,
    omit_none: bool = False,
    schema: str | None = None,
    in_path: bool = False,
    matrix: str | None = None,
    member: MemberRole | None = None,
    rules: Mapping[str, Any] | None = None,
) -> Any:
    """A field of a wire message, documented once: reweighter.wire derives the HTTP model (its
    description, `minItems` when `non_empty`, absent from answers when None and `omit_none`,
    the JSON schema named by `schema`; carried in the URL path, not the body, when `in_path`;
    a float32 matrix whose width is the field named by `matrix`: rows in JSON, one packed
    array in the proto), the client's body and the protobuf mapping from it. `member` (on
    MemberSubmission alone) says what the field is to group assembly: see MemberRole.
    `rules`: JSON Schema keywords its value meets (RULE_KEYWORDS), stated in /openapi.json and
    enforced on every transport by `check_rules`, the one place they are judged."""
    unknown = set(rules or {}) - RULE_KEYWORDS
    if unknown:
        raise TypeError(f"wire(rules=...): no check for {sorted(unknown)}; see RULE_KEYWORDS")
    meta = {
        "member": member,
        "doc": doc,
        "non_empty": non_empty,
        "omit_none": omit_none,
        "schema": schema,
        "in_path": in_path,
        "matrix": matrix,
        "rules": dict(rules or {}),
    }
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


RULE_KEYWORDS = frozenset(
    {"const", "minLength", "maxLength", "minimum", "exclusiveMinimum", "minItems", "items"}
)
"""The JSON Schema keywords a field's `rules` may use: those `check_rules` enforces."""

MAX_ID_CHARS = 256
"""Longest group_id / member_id a member may give."""
MAX_ANSWER_CHARS = 4096
"""Longest answer string: a canonical final answer, not a completion."""
MAX_PROMPT_KEY_CHARS = 1024

_ID = {"minLength": 1, "maxLength": MAX_ID_CHARS}
_PROMPT_KEY = {"minLength": 1, "maxLength": MAX_PROMPT_KEY_CHARS}
_ANSWER = {"maxLength": MAX_ANSWER_CHARS}


def check_rules(message: Any, where: str = "") -> None:
    """Each given (not None) field of `message` against its `wire(rules=...)`: InvalidInput
    naming the field (`where` + its name, `groups[0].` + `prompt_key`). A value of another type
    than a keyword's is left to the engine's type checks. What a rule cannot say (one list as
    long as another, a method's parameters) stays the engine's (reweighter.engine.checks)."""
    for name, rules in _ruled(type(message)):
        value = getattr(message, name)
        if value is not None:
            _meet(rules, value, where + name, name)


@functools.cache
def _ruled(cls: type) -> tuple[tuple[str, Mapping[str, Any]], ...]:
    """(name, rules) of a message's fields that have rules: read once per class (a request's
    every group is checked, on the host path)."""
    return tuple((f.name, f.metadata["rules"]) for f in fields(cls) if f.metadata.get("rules"))


def _meet(rules: Mapping[str, Any], value: Any, field: str, name: str) -> None:
    why = _broken(rules, value, name)
    if why is not None:
        raise InvalidInput(why, field=field)
    items = rules.get("items")
    if items is not None and not isinstance(value, str | bytes | Mapping):
        for i, item in enumerate(value):  # the field's path is made only for a broken one
            if item is not None and _broken(items, item, name) is not None:
                _meet(items, item, f"{field}[{i}]", name)


def _broken(rules: Mapping[str, Any], value: Any, name: str) -> str | None:
    """Why `value` breaks one of `rules` (not their `items`), or None."""
    if "const" in rules and value != rules["const"]:
        return f"only {name}={json.dumps(rules['const'])} is supported"
    if isinstance(value, str):
        if len(value) < rules.get("minLength", 0):
            return "must be a non-empty string"
        if len(value) > rules.get("maxLength", len(value)):
            return f"longer than {rules['maxLength']} characters"
    elif isinstance(value, numbers.Real) and not isinstance(value, bool):
        if "minimum" in rules and value < rules["minimum"]:
            return f"must be >= {rules['minimum']}, got {value!r}"
        if "exclusiveMinimum" in rules and value <= rules["exclusiveMinimum"]:
            return f"must be > {rules['exclusiveMinimum']}, got {value!r}"
    elif "minItems" in rules and hasattr(value, "__len__") and not isinstance(value, Mapping):
        short = len(value) < rules["minItems"]  # a list or an array
        return f"must have at least {rules['minItems']} item(s)" if short else None
    return None


# -- the wire messages: one definition each (reweighter.wire derives HTTP, gRPC and client) --


@dataclass(frozen=True)
class Group:
    """One prompt's completions. Give `completions` (texts) or `embeddings` ([G][D]), not both."""

    one_of: ClassVar[tuple[str, str]] = ("completions", "embeddings")
    """Exactly one of these is given (not null): the schema's oneOf, the engine's check."""

    rewards: Sequence[float] = wire("one base reward per completion", non_empty=True)
    completions: Sequence[str] | None = wire(
        "the group's completions (texts); or give `embeddings`", None, non_empty=True
    )
    embeddings: Sequence[Sequence[float]] | None = wire(
        "precomputed vectors, one per completion ([G][D], or a [G, D] array); or give "
        "`completions`",
        None,
        non_empty=True,
        rules={"items": {"minItems": 1}},
    )
    id: str | None = wire("echoed back in the result", None)
    answers: Sequence[str | None] | None = wire(
        "the canonical final answer of each completion (null: none extracted): darling's "
        "classes, outcome_ucb's counted outcome, stats.distinct_answers",
        None,
        rules={"items": _ANSWER},
    )
    prompt_key: str | None = wire(
        "a stable key of the group's prompt across steps (outcome_ucb's memory)",
        None,
        rules=_PROMPT_KEY,
    )
    quality: Sequence[float] | None = wire(
        "the quality part of each completion's reward (e.g. its correctness term), one per "
        "completion: the method reweights only this part and adds the rest (rewards - quality, "
        "e.g. a format term) back unchanged, and no completion of positive quality ends below "
        "one of quality <= 0 (docs/methods.md); absent: the whole reward is quality",
        None,
    )


@dataclass(frozen=True)
class ReweightRequest:
    groups: Sequence[Group] = wire("the groups to reweight", non_empty=True)
    method: Method | str = wire("reweighting method (see GET /v1/info)", DEFAULT_METHOD)
    """A method name (a Method for the built-ins); the engine rejects names not in the method
    catalogue (field "method")."""
    params: Mapping[str, Any] = wire(
        "the chosen method's parameters only (their schemas: GET /v1/info)",
        factory=dict,
        schema="method_params",
    )
    advantages: AdvantageKind | str = wire(
        "advantage estimator computed after reweighting", AdvantageKind.NONE
    )
    advantage_params: Mapping[str, Any] = wire(
        "the estimator's parameters (pass_at_k: k, success_threshold)",
        factory=dict,
        schema="advantage_params",
    )
    step: int | None = wire(
        "the trainer's global step (outcome_ucb's memory counts once per (prompt_key, step))",
        None,
        rules={"minimum": 0},
    )


@dataclass(frozen=True)
class GroupStats:
    mean_similarity: float = wire("mean cosine similarity over distinct pairs; 1.0 for one")
    lambda_: float | None = wire("the MMR trade-off used (MMR only)", None, omit_none=True)
    """The MMR trade-off used for this group; None for other methods. On the wire: `lambda`."""
    effective_size: float | None = wire(
        "n^2 / sum_ij max(0, s_ij): 1 for identical completions, n for orthogonal ones",
        None,
        omit_none=True,
    )
    distinct_answers: int | None = wire(
        "distinct non-null answers, when the group carried answers", None, omit_none=True
    )
    classes: int | None = wire("answer classes the method used (darling)", None, omit_none=True)


@dataclass(frozen=True)
class GroupResult:
    id: str | None = wire("the request's group id")
    rewards: list[float] = wire("the reweighted rewards, in the order of the request")
    advantages: list[float] | None = wire("absent when advantages = none", omit_none=True)
    stats: GroupStats = wire("the group's statistics")


@dataclass(frozen=True)
class ReweightResult:
    method: str = wire("the method used")
    model: str | None = wire("encoder id; null when all embeddings were given")
    """Encoder id, or None when every group came with embeddings."""
    groups: list[GroupResult] = wire("one result per group, in the order of the request")


@dataclass(frozen=True)
class EmbedRequest:
    """Texts to embed with the service's encoder (TEI's conventions: one text or a list)."""

    inputs: Sequence[str] | str = wire("texts (or one text)", non_empty=True)
    normalize: bool = wire(
        "only true is supported: the encoder returns unit vectors", True, rules={"const": True}
    )

    def texts(self) -> list[str]:
        """The texts to encode; the fields' rules met first (`normalize=false` is refused
        naming the field)."""
        check_rules(self)
        return [self.inputs] if isinstance(self.inputs, str) else list(self.inputs)


@dataclass(frozen=True)
class EmbedResult:
    model: str = wire("encoder id")
    dim: int = wire("the vectors' dimension")
    embeddings: Any = wire("one unit vector per input, in order ([N][dim])", matrix="dim")
    """numpy float32 [N, dim]; on the wire a list of rows (HTTP) or one packed array (gRPC),
    whose width is the message's `dim`."""


# -- group assembly: one member of a group whose siblings arrive separately ------------------


class MemberReason(StrEnum):
    """Why an answer is incomplete (`MemberResult.reason`); None when it is complete."""

    SHORT = "short"
    """The round closed at a member's deadline with fewer than group_size members: `members`
    says how many were present. Every member of the round gets this same answer."""
    COMPUTING = "computing"
    """The group was whole (`members` == group_size) but still being reweighted when this
    member's deadline came; a retry after it finishes gets the complete answer."""
    STORE_UNAVAILABLE = "store_unavailable"
    """The shared store (Redis) did not answer by the deadline: `members` counts only the
    members that waited on the same replica."""


@dataclass(frozen=True)
class MemberSubmission:
    """One completion of a group whose siblings arrive separately (other calls, other replicas).

    The group is reweighted in `member_id` string order once `group_size` distinct members are
    in, so the answer never depends on arrival order. Give `completion` or `embedding`.
    """

    one_of: ClassVar[tuple[str, str]] = ("completion", "embedding")
    """Exactly one of these is given (not null): the schema's oneOf, the engine's check."""

    group_id: str = wire("the group", in_path=True, member="key", rules=_ID)
    member_id: str = wire("unique in the group; sets the group's order", member="key", rules=_ID)
    group_size: int = wire(
        "distinct members that make the group whole", member="shared", rules={"minimum": 1}
    )
    reward: float = wire("the member's base reward", member="payload")
    completion: str | None = wire("the completion; or give `embedding`", None, member="payload")
    embedding: Sequence[float] | None = wire(
        "a precomputed vector (or a [D] array)", None, member="payload", rules={"minItems": 1}
    )
    method: Method | str = wire(
        "reweighting method (see GET /v1/info)", DEFAULT_METHOD, member="shared"
    )
    params: Mapping[str, Any] = wire(
        "as /v1/reweight; the same for every member",
        factory=dict,
        schema="method_params",
        member="shared",
    )
    advantages: AdvantageKind | str = wire(
        "advantage estimator computed after reweighting", AdvantageKind.NONE, member="shared"
    )
    timeout_s: float | None = wire(
        "seconds to wait for the group; server default and cap if absent/over",
        None,
        member="call",
        rules={"exclusiveMinimum": 0},
    )
    """None: the server default (`assembly_timeout_s`); capped at `assembly_max_timeout_s`."""
    reuse_ids: bool = wire(
        "true: member ids are reused across rounds of this group id on purpose, so a known id "
        "with another payload joins the next round instead of a 409",
        False,
        member="call",
    )
    """False (the default): a member id already answered, sent with another payload, is a 409
    naming the field (a non-deterministic reward, an id collision). The same payload is a
    retry either way."""
    answer: str | None = wire(
        "the member's extracted final answer (null: none): darling's classes, outcome_ucb's "
        "counted outcome, stats.distinct_answers",
        None,
        member="payload",
        rules=_ANSWER,
    )
    advantage_params: Mapping[str, Any] = wire(
        "as /v1/reweight (pass_at_k: k, success_threshold); the same for every member",
        factory=dict,
        schema="advantage_params",
        member="shared",
    )
    step: int | None = wire(
        "the trainer's global step, as /v1/reweight (outcome_ucb); the same for every member",
        None,
        member="shared",
        rules={"minimum": 0},
    )
    prompt_key: str | None = wire(
        "a stable key of the group's prompt across steps (outcome_ucb's memory); the same for "
        "every member",
        None,
        member="shared",
        rules=_PROMPT_KEY,
    )
    quality: float | None = wire(
        "the quality part of the member's reward (as groups[].quality of /v1/reweight: the "
        "method reweights only it, the rest is added back); every member of a group gives it "
        "or none does (a member that differs is a 409 naming quality)",
        None,
        member="payload",
    )


@dataclass(frozen=True)
class MemberResult:
    """The member's reweighted reward; `complete` is False when `reason` says why not."""

    group_id: str = wire("the member's group")
    member_id: str = wire("the member")
    reward: float = wire("reweighted; equals raw_reward when incomplete")
    raw_reward: float = wire("the reward the member was sent with")
    advantage: float | None = wire("null unless advantages were asked for")
    """None unless advantages were asked for; when incomplete, over the `members` counted, from
    their raw rewards (method "none")."""
    complete: bool = wire("false: the answer is raw, see reason")
    reason: MemberReason | None = wire("null when complete; else why not (docs/integrations.md)")
    """None when complete; else why not (MemberReason)."""
    stats: GroupStats | None = wire("the group's; null when incomplete")
    """The group's statistics as /v1/reweight gives them; None when incomplete."""
    members: int = wire("members the answer was computed over")
    """How many members the answer was computed over (group_size when complete)."""
    round: int = wire("the round of group_id the member was in (0 first)", 0)
    """Which round of `group_id` the member was in: 0, or more when it arrived after earlier
    rounds of the same group id had been answered (a late or extra member, or a reused id)."""


_GROUP_LISTS = {"quality": "quality"}
"""Payload fields whose Group list is not their plural (a mass noun keeps its name)."""


def group_list(name: str) -> str:
    """The Group list a PAYLOAD member field is one item of: reward -> rewards, quality ->
    quality."""
    return _GROUP_LISTS.get(name, f"{name}s")


def member_fields(role: MemberRole) -> tuple[str, ...]:
    """MemberSubmission's fields of one role (MemberRole), in their order of definition."""
    return tuple(f.name for f in fields(MemberSubmission) if f.metadata["member"] == role)


class MethodInfo(TypedDict):
    description: str
    params: dict[str, Any]
    """The parameters' JSON schema."""


class EngineInfo(TypedDict):
    """What `info()` reports on every transport (GET /v1/info, the Info RPC)."""

    version: str
    model: str | None
    dim: int | None
    device: str | None
    precision: str | None
    """Encoder precision in use (fp32, int8, fp16, bf16); None until the model is loaded."""
    ready: bool
    long_text: str
    methods: dict[str, MethodInfo]
    advantages: list[str]
    limits: dict[str, int]
    tenant: NotRequired[str]
    """The caller's tenant (transports add it; reweighter.tenancy)."""

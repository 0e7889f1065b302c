"""The engine's request checks: the one place a request (or a group member) is judged.

Every transport hands its request here unjudged; every kernel after this trusts what comes out.
A failure is an InvalidInput (HTTP 422 / INVALID_ARGUMENT) or LimitExceeded (413 /
RESOURCE_EXHAUSTED) naming the field as a dotted path (`groups[2].rewards[0]`); a group member
(`check_member`, for reweighter.assembly) is judged by the same rules with its flat field names
(`reward`, `completion`, `embedding`, `params.eps`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import BaseModel, ValidationError

from ..errors import InvalidInput, LimitExceeded
from ..limits import Limits
from ..methods import MethodSpec, get_method
from ..methods.estimators import EstimatorSpec, get_estimator
from ..types import (
    MAX_ANSWER_CHARS,  # noqa: F401 - its old place: callers may import it from here
    MAX_ID_CHARS,  # noqa: F401
    MAX_PROMPT_KEY_CHARS,  # noqa: F401
    AdvantageKind,
    MemberSubmission,
    ReweightRequest,
    check_rules,
)


@dataclass(frozen=True)
class Checked:
    """A validated request: parsed params and, per group, either texts or an embedding array."""

    method: str
    """A name in the method catalogue (methods/catalog.py)."""
    params: BaseModel
    advantages: AdvantageKind
    texts: list[list[str] | None]
    embeddings: list[np.ndarray | None]
    rewards: list[list[float]]
    ids: list[str | None]
    answers: list[list[str | None] | None]
    prompt_keys: list[str | None]
    step: int | None = None
    advantage_params: BaseModel | None = None
    needs: tuple[str, ...] = ()
    quality: list[list[float] | None] | None = None
    """Per group, the quality part of its rewards (None: the whole reward is quality); None
    when no group gave one."""

    def flat_texts(self) -> list[str]:
        return [t for group in self.texts if group is not None for t in group]

    def split(self, flat: np.ndarray | None) -> list[np.ndarray]:
        """Per-group vectors: slices of the flat text embeddings, or the given embeddings."""
        out: list[np.ndarray] = []
        pos = 0
        for texts, emb in zip(self.texts, self.embeddings, strict=True):
            if texts is not None:
                assert flat is not None
                out.append(flat[pos : pos + len(texts)])
                pos += len(texts)
            else:
                assert emb is not None
                out.append(emb)
        return out


def check_texts(texts: Sequence[str], limits: Limits) -> None:
    """The inputs of an embed call (field "inputs")."""
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise InvalidInput("must be a list of strings", field="inputs")
    if not texts:
        raise InvalidInput("must not be empty", field="inputs")
    _within(len(texts), limits.max_completions, "inputs", "inputs")
    chars = 0
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise InvalidInput("must be a string", field=f"inputs[{i}]")
        _check_unicode(t, f"inputs[{i}]")
        chars += len(t)
    _within(chars, limits.max_chars, "characters", "inputs")


@dataclass(frozen=True)
class _Settings:
    """The settings a request and a group member name alike (method, params, advantages,
    advantage_params, step), checked by one function for both."""

    spec: MethodSpec
    params: BaseModel
    estimator: EstimatorSpec
    adv_params: BaseModel
    step: int | None

    @property
    def kind(self) -> str:
        return str(self.estimator.name)

    @property
    def memory(self) -> bool:
        return "memory" in self.spec.needs


def _check_settings(message: ReweightRequest | MemberSubmission) -> _Settings:
    spec = get_method(message.method)
    params = _check_params(spec.name, spec.params_model, message.params)
    estimator = get_estimator(message.advantages)
    adv_params = check_advantage_params(estimator, message.advantage_params, spec.name)
    step = _check_step(message.step, required="memory" in spec.needs, method=spec.name)
    return _Settings(spec, params, estimator, adv_params, step)


def check_request(request: ReweightRequest, limits: Limits) -> Checked:
    check_rules(request)
    settings = _check_settings(request)
    spec, params, kind = settings.spec, settings.params, settings.kind
    adv_params, memory, step = settings.adv_params, settings.memory, settings.step

    groups = request.groups
    if not groups:
        raise InvalidInput("at least one group is required", field="groups")
    _within(len(groups), limits.max_groups, "groups", "groups")
    _within(sum(len(g.rewards) for g in groups), limits.max_completions, "completions", "groups")

    texts: list[list[str] | None] = []
    embs: list[np.ndarray | None] = []
    rewards: list[list[float]] = []
    answers: list[list[str | None] | None] = []
    keys: list[str | None] = []
    quality: list[list[float] | None] = []
    chars = 0
    for gi, g in enumerate(groups):
        where = f"groups[{gi}]"
        check_rules(g, f"{where}.")
        r = _check_rewards(g.rewards, f"{where}.rewards")
        if len(r) > limits.max_group_size:
            raise LimitExceeded(
                f"{len(r)} completions exceed the group limit of {limits.max_group_size}",
                field=f"{where}.rewards",
            )
        quality.append(_check_quality(g.quality, r, f"{where}.quality"))
        a = _check_answers(g.answers, len(r), f"{where}.answers")
        if a is not None:
            chars += sum(len(x) for x in a if x is not None)
        key = _check_prompt_key(g.prompt_key, f"{where}.prompt_key")
        if memory:
            if key is None:
                raise InvalidInput(
                    f"method {str(spec.name)!r} needs a prompt_key per group (a stable key of the "
                    "prompt across steps)",
                    field=f"{where}.prompt_key",
                )
            if a is None:
                raise InvalidInput(
                    f"method {str(spec.name)!r} needs the group's answers (one string or null per "
                    "completion)",
                    field=f"{where}.answers",
                )
        check_within_group(
            settings.estimator, adv_params, len(r), f"the group's {len(r)} completions ({where})"
        )
        answers.append(a)
        keys.append(key)
        if _first_given(g, where):
            c = _check_completions(g.completions, len(r), f"{where}.completions")
            chars += sum(len(t) for t in c)
            texts.append(c)
            embs.append(None)
        else:
            embs.append(_check_embeddings(g.embeddings, len(r), f"{where}.embeddings"))
            texts.append(None)
        rewards.append(r)
    _within(chars, limits.max_chars, "characters", "groups")
    return Checked(
        method=spec.name,
        params=params,
        advantages=kind,
        texts=texts,
        embeddings=embs,
        rewards=rewards,
        ids=[g.id for g in groups],
        answers=answers,
        prompt_keys=keys,
        step=step,
        advantage_params=adv_params,
        needs=spec.needs,
        quality=quality if any(q is not None for q in quality) else None,
    )


def check_advantage_params(spec: EstimatorSpec, given: Any, method: str) -> BaseModel:
    """The estimator's parameters (field "advantage_params.<name>") by its catalogue entry
    (methods/estimators.py), and whether it goes with `method` (field "advantages")."""
    if spec.methods is not None and method not in spec.methods:
        goes = " or ".join(repr(m) for m in spec.methods)
        raise InvalidInput(
            f"{spec.why_methods or spec.name}, so it goes with method {goes}, not {method!r}",
            field="advantages",
        )
    model = spec.params_model
    values = given or {}
    if not isinstance(values, Mapping):
        raise InvalidInput("must be an object", field="advantage_params")
    try:
        return model.model_validate(dict(values))
    except ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(p) for p in first.get("loc", ()))
        takes = ", ".join(model.model_fields) or "no parameters"
        raise InvalidInput(
            f"{first['msg']} (advantage kind {str(spec.name)!r} takes: {takes})",
            field=f"advantage_params.{loc}" if loc else "advantage_params",
        ) from e


def check_within_group(spec: EstimatorSpec, params: BaseModel, n: int, where: str) -> None:
    """An estimator parameter bounded by the group's size (pass_at_k's k <= n), against a group
    of `n` (`where` says which: "the group's 8 completions (groups[2])", "the group_size 8")."""
    bound = spec.within_group
    if bound is not None and getattr(params, bound) > n:
        value = getattr(params, bound)
        raise InvalidInput(
            f"{bound} = {value} exceeds {where}; it needs {bound} <= n",
            field=f"advantage_params.{bound}",
        )


def _check_step(value: Any, *, required: bool, method: str) -> int | None:
    if value is None:
        if required:
            raise InvalidInput(
                f"method {method!r} needs the trainer's global step (an integer >= 0)",
                field="step",
            )
        return None
    if isinstance(value, bool) or not isinstance(value, int | np.integer):  # >= 0: its rule
        raise InvalidInput(f"must be an integer >= 0, got {value!r}", field="step")
    return int(value)


def _check_prompt_key(value: Any, field: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):  # its length: its rule (types.check_rules)
        raise InvalidInput("must be a non-empty string", field=field)
    _check_unicode(value, field)
    return value


def _check_answer(value: Any, field: str) -> str | None:
    """One answer: a string (valid Unicode; its length bound is its rule) or None."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidInput(f"must be a string or null, got {type(value).__name__}", field=field)
    _check_unicode(value, field)
    return value


def _check_answers(values: Any, n: int, field: str) -> list[str | None] | None:
    """One string or null per completion."""
    if values is None:
        return None
    if isinstance(values, str) or not isinstance(values, Sequence):
        raise InvalidInput("must be a list of strings or nulls, one per completion", field=field)
    if len(values) != n:
        raise InvalidInput(f"has {len(values)} items but rewards has {n}", field=field)
    return [_check_answer(a, f"{field}[{i}]") for i, a in enumerate(values)]


@dataclass(frozen=True)
class CheckedMember:
    """A validated group member: parsed names and params, its text or its vector, its wait."""

    group_id: str
    member_id: str
    group_size: int
    reward: float
    method: str
    params: BaseModel
    advantages: AdvantageKind
    completion: str | None
    embedding: np.ndarray | None
    """float32 [D], finite and non-zero."""
    timeout_s: float
    """The member's own, or the default; capped at the maximum."""
    answer: str | None = None
    """The member's extracted final answer (None: none given)."""
    advantage_params: BaseModel | None = None
    """The estimator's parsed parameters (pass_at_k's k, checked against group_size)."""
    step: int | None = None
    prompt_key: str | None = None
    """outcome_ucb's (required with it); every member of a round must agree (the round's meta)."""
    quality: float | None = None
    """The quality part of its reward (None: none given); all or none of a round's members."""


def check_member(
    member: MemberSubmission, limits: Limits, *, default_timeout_s: float, max_timeout_s: float
) -> CheckedMember:
    """One member of a group sent on its own: the rules of a request's group, for one member.

    What only the whole group can show (its total characters, a result that overflows) is
    checked when the group is reweighted."""
    check_rules(member)  # the ids' lengths, group_size >= 1, timeout_s > 0, ...
    for name in ("group_id", "member_id"):
        if not isinstance(getattr(member, name), str):
            raise InvalidInput("must be a non-empty string", field=name)
    size = member.group_size
    if isinstance(size, bool) or not isinstance(size, int | np.integer):
        raise InvalidInput("must be a positive integer", field="group_size")
    if size > limits.max_group_size:
        raise LimitExceeded(
            f"{size} exceeds the group limit of {limits.max_group_size}", field="group_size"
        )
    timeout = default_timeout_s if member.timeout_s is None else member.timeout_s
    if isinstance(timeout, bool) or not isinstance(timeout, int | float | np.floating):
        raise InvalidInput("must be a number of seconds", field="timeout_s")
    if not math.isfinite(timeout):  # > 0: its rule
        raise InvalidInput("must be a positive number of seconds", field="timeout_s")
    settings = _check_settings(member)
    spec, params, kind = settings.spec, settings.params, settings.kind
    adv_params, memory, step = settings.adv_params, settings.memory, settings.step
    check_within_group(settings.estimator, adv_params, size, f"the group_size {size}")
    prompt_key = _check_prompt_key(member.prompt_key, "prompt_key")
    if memory and prompt_key is None:
        raise InvalidInput(
            f"method {str(spec.name)!r} needs the group's prompt_key (a stable key of the prompt "
            "across steps), the same in every member",
            field="prompt_key",
        )
    reward = _check_number(member.reward, "reward")
    text, vector = None, None
    if _first_given(member, "completion"):
        text = member.completion
        if not isinstance(text, str):
            raise InvalidInput("must be a string", field="completion")
        _check_unicode(text, "completion")
        _within(len(text), limits.max_chars, "characters", "completion")
    else:
        vector = _check_vector(member.embedding, "embedding")
    return CheckedMember(
        group_id=member.group_id,
        member_id=member.member_id,
        group_size=int(size),
        reward=reward,
        method=spec.name,
        params=params,
        advantages=kind,
        completion=text,
        embedding=vector,
        timeout_s=min(float(timeout), max_timeout_s),
        answer=_check_answer(member.answer, "answer"),
        advantage_params=adv_params,
        step=step,
        prompt_key=prompt_key,
        quality=_check_member_quality(member.quality, reward),
    )


def _check_member_quality(value: Any, reward: float) -> float | None:
    """A member's quality: the rule of one item of a group's `quality` (_check_quality)."""
    if value is None:
        return None
    q = _check_number(value, "quality")
    if not math.isfinite(reward - q):
        raise InvalidInput(
            f"reward - quality overflows a 64-bit float ({reward} - {q})", field="quality"
        )
    return q


def _texts_given(texts: Any, vectors: Any, what: str, field: str) -> bool:
    """Whether texts were given, when exactly one of texts and vectors was."""
    if (texts is None) == (vectors is None):
        both = ", not both" if texts is not None else ""
        raise InvalidInput(f"give either {what}{both}", field=field)
    return texts is not None


def _first_given(message: Any, field: str) -> bool:
    """Whether the first of the message's `one_of` pair (types: Group, MemberSubmission) was
    given, when exactly one of the two was."""
    first, second = type(message).one_of
    a, b = getattr(message, first), getattr(message, second)
    return _texts_given(a, b, f"{first} or {second}", field)


def _within(n: int, limit: int, what: str, field: str) -> None:
    if n > limit:
        raise LimitExceeded(f"{n} {what} exceed the limit of {limit}", field=field)


def check_method(method: object, params: Any) -> BaseModel:
    """A method's name and parameters, judged as a request's are (InvalidInput naming `method`
    or `params.<name>`): for a route that takes them apart from a request body (the OpenRLHF
    route's query string) and must refuse them before any sample is seated."""
    spec = get_method(method)
    return _check_params(spec.name, spec.params_model, params)


def _check_params(method: str, model: type[BaseModel], given: Any) -> BaseModel:
    params_in = given or {}
    if not isinstance(params_in, dict):
        params_in = dict(params_in)
    try:
        return model.model_validate(params_in)
    except ValidationError as e:
        first = e.errors()[0]
        names = [f.alias or name for name, f in model.model_fields.items()]
        takes = ", ".join(names) or "no parameters"
        raise InvalidInput(
            f"{first['msg']} (method {str(method)!r} takes: {takes})",
            field=_param_field(first),
        ) from e


def _param_field(err: Any) -> str:
    loc = ".".join(str(p) for p in err.get("loc", ()) if p != "__root__")
    return f"params.{loc}" if loc else "params"


def _check_completions(values: Any, n: int, field: str) -> list[str]:
    if isinstance(values, str) or not isinstance(values, Sequence):
        raise InvalidInput("must be a list of strings", field=field)
    if len(values) != n:
        raise InvalidInput(f"has {len(values)} items but rewards has {n}", field=field)
    for ci, t in enumerate(values):
        if not isinstance(t, str):
            raise InvalidInput("must be a string", field=f"{field}[{ci}]")
        _check_unicode(t, f"{field}[{ci}]")
    return list(values)


def _check_unicode(text: str, field: str) -> None:
    """A lone surrogate ("\\ud800" in JSON) is no Unicode text: the tokenizer cannot take it."""
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise InvalidInput(
                f"is not valid Unicode: lone surrogate at character {e.start}", field=field
            ) from None


def _check_rewards(values: Any, field: str) -> list[float]:
    if isinstance(values, str | bytes) or not isinstance(values, Sequence | np.ndarray):
        raise InvalidInput("must be a list of numbers", field=field)
    if len(values) == 0:
        raise InvalidInput("empty group: at least one completion is required", field=field)
    return [_check_number(v, f"{field}[{j}]") for j, v in enumerate(values)]


def _check_number(v: Any, field: str) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float | np.floating | np.integer):
        raise InvalidInput(f"must be a number, got {type(v).__name__}", field=field)
    try:
        f = float(v)
    except OverflowError:  # a 400-digit integer literal
        raise InvalidInput("is out of range for a float", field=field) from None
    if not math.isfinite(f):
        raise InvalidInput(f"must be finite, got {f}", field=field)
    return f


def _check_quality(values: Any, rewards: list[float], field: str) -> list[float] | None:
    """The quality part of each reward: a finite number per completion, whose rest
    (reward - quality, added back unchanged after reweighting) is finite too."""
    if values is None:
        return None
    if isinstance(values, str | bytes) or not isinstance(values, Sequence | np.ndarray):
        raise InvalidInput("must be a list of numbers, one per completion", field=field)
    if len(values) != len(rewards):
        raise InvalidInput(f"has {len(values)} items but rewards has {len(rewards)}", field=field)
    q = [_check_number(v, f"{field}[{j}]") for j, v in enumerate(values)]
    for j, (r, v) in enumerate(zip(rewards, q, strict=True)):
        if not math.isfinite(r - v):
            raise InvalidInput(
                f"reward - quality overflows a 64-bit float ({r} - {v})", field=f"{field}[{j}]"
            )
    return q


def _check_embeddings(values: Any, n: int, field: str) -> np.ndarray:
    try:
        arr = np.asarray(values, dtype=np.float32)
    except OverflowError:  # an integer literal beyond any float
        raise InvalidInput("has a number out of range for a float", field=field) from None
    except (TypeError, ValueError) as e:
        raise InvalidInput("must be a list of equal-length lists of numbers", field=field) from e
    if arr.ndim != 2:
        raise InvalidInput(
            "must be a list of equal-length lists of numbers (one vector per completion)",
            field=field,
        )
    if arr.shape[0] != n:  # a vector's one dimension at least: its rule (types.check_rules)
        raise InvalidInput(f"has {arr.shape[0]} vectors but rewards has {n}", field=field)
    _check_rows(arr, lambda j: f"{field}[{j}]")
    return arr


def _check_vector(values: Any, field: str) -> np.ndarray:
    """One member's embedding: [D] float32, by the rules of a group's rows."""
    try:
        arr = np.asarray(values, dtype=np.float32)
    except OverflowError:
        raise InvalidInput("has a number out of range for a float", field=field) from None
    except (TypeError, ValueError) as e:
        raise InvalidInput("must be a list of numbers", field=field) from e
    if arr.ndim != 1:  # one dimension at least: its rule (types.check_rules)
        raise InvalidInput("must be a list of numbers (one vector)", field=field)
    _check_rows(arr[None, :], lambda _: field)
    return arr


def _check_rows(arr: np.ndarray, row_field: Callable[[int], str]) -> None:
    """Cosine similarity needs finite, non-zero vectors."""
    finite = np.isfinite(arr).all(axis=1)
    if not finite.all():
        j = int(np.argmin(finite))
        raise InvalidInput("contains NaN or infinity", field=row_field(j))
    norms = np.linalg.norm(arr, axis=1)
    if (norms == 0).any():
        j = int(np.argmin(norms))
        raise InvalidInput("is a zero vector: cosine similarity is undefined", field=row_field(j))

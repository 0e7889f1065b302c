"""Diversity-aware rewards for TRL's GRPOTrainer.

    trainer = GRPOTrainer(..., reward_funcs=[reweighted(accuracy, fmt, backend="http://rw:8080",
                                                        num_generations=args.num_generations)])

The returned callable follows TRL's reward convention, `f(prompts, completions, **columns)`. It
scores each completion with the user's base reward functions (weighted sum), reweights every
group of `num_generations` completions by DRA or MMR through a client (`reweighter.client.connect`:
the HTTP or gRPC service, or the engine in process), and returns the reweighted reward; TRL then
turns it into advantages, which is where both papers place the adjustment.

TRL calls reward functions on each process's slice of the batch, and one prompt's completions may
straddle two processes. Reweighting needs the whole group, so every process contributes its
slice, the main process reweights the whole global batch in ONE backend call, and broadcasts the
result (`_distributed.on_main`); each process keeps its own part. One call from one place
(rather than one per process) means one network round trip per step, one batch for the
embedder, and no group is ever cut. This module is the reward function itself (base rewards,
groups, the call); the collective is `_distributed.py`, the timings and the logged statistics
`_trl_stats.py`, the options `options.py`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..client import Reweighter
from ._distributed import my_part, on_main
from ._stacks import prompt_key, reweight_by_key
from ._trl_stats import Timings, batch_stats, log
from .options import CONNECTION_FIELDS, ReweighterOptions

RewardFunc = Callable[..., Sequence[float | None]]


def completion_text(completion: Any) -> str:
    """Plain text of a TRL completion: a string (standard format), or a list of chat messages
    (conversational), whose contents are joined. The trainer's reward functions use it too."""
    if isinstance(completion, str):
        return completion
    return "".join(str(m.get("content", "")) for m in completion)


def _key(prompt: Any) -> str:
    return prompt_key(prompt)[:12]


@dataclass
class _Batch:
    """What every process contributes: its slice, in its order."""

    prompts: list[Any]
    texts: list[str]
    rewards: list[float]
    step: int = 0
    answers: list[str | None] | None = None
    quality: list[float] | None = None


@dataclass
class ReweightedReward:
    """TRL reward function: weighted base rewards, reweighted per group by a Reweighter backend.

    `num_generations` must equal GRPOConfig.num_generations (and `num_generations_eval` its
    eval counterpart, if it differs): it is how the global batch is cut into groups, and every
    group is checked to hold one prompt, so a mismatch fails loudly instead of mixing prompts.

    `advantages="grpo"|"dr_grpo"` asks the backend for advantages and returns those instead of
    rewards; pair it with GRPOConfig(scale_rewards="none"), so TRL's own centering is a no-op.
    """

    reward_funcs: Sequence[RewardFunc]
    backend: Reweighter
    """A client (`reweighter.client.connect`), or anything with `reweight` (a ReweightEngine)."""
    num_generations: int
    weights: Sequence[float] | None = None
    options: ReweighterOptions = field(default_factory=ReweighterOptions)
    """What each call asks for (`request()`: method, params, advantages, advantage_params),
    names and defaults as ReweighterOptions has them; its connection fields are `reweighted()`'s."""
    num_generations_eval: int | None = None
    answer_func: RewardFunc | None = None
    """Optional: each completion's canonical final answer (a string, or None where it gives
    none), called like a reward function `f(prompts, completions, **columns)`. Sent as the
    group's `answers`: darling's classes, outcome_ucb's counts, `stats.distinct_answers`."""
    quality: Sequence[RewardFunc] | None = None
    """Optional: which of `reward_funcs` score quality (correctness). Their weighted sum is sent
    as each group's `quality`: the method reweights only that part and adds the other terms
    (format, length) back unchanged, so no diversity term ranks a wrong completion above a
    right one (docs/methods.md, "Quality apart from the rest"). None: the whole reward."""
    on_result: Callable[[dict[str, Any]], None] | None = None
    """Called on every process after each batch with its slice (tracing, tests)."""
    name: str = "reweighted"
    """What TRL calls this function in its metrics: rewards/<name>/mean."""
    timings: Timings = field(default_factory=Timings)

    def __post_init__(self) -> None:
        if not self.reward_funcs:
            raise ValueError("reward_funcs: give at least one base reward function")
        if self.weights is None:
            self.weights = [1.0] * len(self.reward_funcs)
        if len(self.weights) != len(self.reward_funcs):
            raise ValueError(
                f"weights: {len(self.weights)} given for {len(self.reward_funcs)} reward functions"
            )
        if self.num_generations < 1:
            raise ValueError("num_generations: must be at least 1")
        for func in self.quality or ():
            if not any(func is f for f in self.reward_funcs):
                name = getattr(func, "__name__", repr(func))
                raise ValueError(
                    f"quality: {name} is not one of the reward functions; name the quality "
                    "term among them, as reweighted(accuracy, fmt, quality=accuracy)"
                )
        self._step = 0
        self.__name__ = self.name  # TRL names reward functions by __name__

    # -- TRL entry point ------------------------------------------------------------------

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any):
        t0 = time.perf_counter()
        base, quality = self._base_rewards(prompts, completions, kwargs)
        answers = self._answers(prompts, completions, kwargs)
        t1 = time.perf_counter()
        # The trainer's global step when TRL passes its state (outcome_ucb counts once per
        # (prompt, step)); else this function's own call count.
        state = kwargs.get("trainer_state")
        step = int(getattr(state, "global_step", self._step) if state is not None else self._step)
        texts = [completion_text(c) for c in completions]
        local = _Batch(list(prompts), texts, base, step, answers, quality)
        (values, stats), slices, rank = on_main(local, self._reweight_all)
        out = my_part(values, [len(s.texts) for s in slices], rank)
        t2 = time.perf_counter()
        self._step += 1
        self.timings.base_s += t1 - t0
        self.timings.reweight_s += t2 - t1
        log(kwargs.get("log_metric"), stats, t2 - t1)
        if self.on_result is not None:
            self.on_result(
                {
                    **stats,
                    "prompts": local.prompts,
                    "completions": local.texts,
                    "base_rewards": base,
                    "rewards": out,
                }
            )
        return out

    # -- pieces ---------------------------------------------------------------------------

    def _base_rewards(self, prompts, completions, kwargs) -> tuple[list[float], list[float] | None]:
        """The weighted sum of the reward functions, and of the quality ones among them (None
        when no quality was named); each function is called once."""
        columns = {k: v for k, v in kwargs.items() if k not in ("log_metric", "log_extra")}
        total = [0.0] * len(completions)
        quality = [0.0] * len(completions) if self.quality else None
        for func, w in zip(self.reward_funcs, self.weights or (), strict=True):
            is_quality = quality is not None and any(func is f for f in self.quality or ())
            values = func(prompts=prompts, completions=completions, **columns)
            if len(values) != len(completions):
                name = getattr(func, "__name__", repr(func))
                raise ValueError(
                    f"reward function {name} returned {len(values)} values "
                    f"for {len(completions)} completions"
                )
            for i, v in enumerate(values):
                # None means "does not apply" in TRL; it contributes nothing, like TRL's nansum.
                if v is not None and not math.isnan(v):
                    total[i] += w * float(v)
                    if is_quality:
                        quality[i] += w * float(v)  # type: ignore[index]
        return total, quality

    def _answers(self, prompts, completions, kwargs) -> list[str | None] | None:
        if self.answer_func is None:
            return None
        columns = {k: v for k, v in kwargs.items() if k not in ("log_metric", "log_extra")}
        values = list(self.answer_func(prompts=prompts, completions=completions, **columns))
        if len(values) != len(completions):
            raise ValueError(
                f"answer_func returned {len(values)} answers for {len(completions)} completions"
            )
        for v in values:
            if v is not None and not isinstance(v, str):
                raise TypeError(f"answer_func: answers must be strings or None, got {v!r}")
        return values

    def _reweight_all(self, slices: list[_Batch]) -> tuple[list[float], dict[str, Any]]:
        prompts = [p for s in slices for p in s.prompts]
        texts = [t for s in slices for t in s.texts]
        base = [r for s in slices for r in s.rewards]
        hashes = [_key(p) for p in prompts]  # once per completion
        size = self._group_size(hashes)
        step = slices[0].step
        # consecutive runs of `size` (checked to be one prompt each); the key is the group's id
        keys = [f"{step}:{i // size}:{hashes[i - i % size]}" for i in range(len(texts))]
        t0 = time.perf_counter()
        answers = None
        if all(s.answers is not None for s in slices):
            answers = [a for s in slices for a in s.answers or []]
        quality = None
        if all(s.quality is not None for s in slices):
            quality = [q for s in slices for q in s.quality or []]
        out = reweight_by_key(
            self.backend,
            keys,
            base,
            texts,
            **{**self.options.request(), "advantages": str(self.options.advantages)},
            answers=answers,
            quality=quality,
            prompt_keys=[prompt_key(p) for p in prompts],
            step=step,
        )
        self.timings.backend_s += time.perf_counter() - t0
        self.timings.calls += 1
        self.timings.groups += out.groups
        self.timings.completions += len(texts)
        assert out.request is not None and out.result is not None  # a non-empty batch
        values = out.advantages if out.advantages is not None else out.rewards
        return values, batch_stats(list(out.request.groups), out.result)

    def _group_size(self, keys: list[str]) -> int:
        """num_generations (train) or num_generations_eval, whichever cuts the batch (its
        prompts' hashes) into groups of one prompt each; anything else is a configuration
        error."""
        candidates = [self.num_generations]
        if self.num_generations_eval and self.num_generations_eval != self.num_generations:
            candidates.append(self.num_generations_eval)
        for g in candidates:
            if len(keys) % g == 0 and all(
                len(set(keys[i : i + g])) == 1 for i in range(0, len(keys), g)
            ):
                return g
        raise ValueError(
            f"num_generations={self.num_generations}: the global batch of {len(keys)} completions "
            "does not split into groups of one prompt each; set it to GRPOConfig.num_generations"
        )


def reweighted(
    *reward_funcs: RewardFunc,
    num_generations: int,
    backend: str | Reweighter | None = None,
    weights: Sequence[float] | None = None,
    num_generations_eval: int | None = None,
    answer_func: RewardFunc | None = None,
    quality: RewardFunc | Sequence[RewardFunc] | None = None,
    **options: Any,
) -> ReweightedReward:
    """The one-liner: `reward_funcs=[reweighted(acc, fmt, num_generations=8, backend=URL)]`.

    `backend` is ReweighterOptions' `url` (a `reweighter.client.connect` URL: http(s)://,
    grpc(s)://, inprocess://; left out, the options' one default, the local service) or an
    object with `reweight(ReweightRequest)`. Every other keyword is an option of
    ReweighterOptions (integrations/options.py: api_key, timeout_s, long_text, method, params,
    advantages, advantage_params), validated there and named when wrong or when the backend
    cannot apply it: nothing is restated here, nothing dropped.

    `quality`: the reward function(s), among `reward_funcs`, that score quality
    (`reweighted(accuracy, fmt, quality=accuracy)`): only their weighted part is reweighted,
    the rest is added back unchanged (ReweightedReward.quality).
    """
    if "url" in options:
        raise TypeError("reweighted(): give the URL as backend=, not url=")
    if backend is not None and not isinstance(backend, str):
        if not callable(getattr(backend, "reweight", None)):
            raise TypeError("backend must be a URL string or an object with a reweight() method")
        for name in CONNECTION_FIELDS:
            if options.get(name) is not None:
                raise ValueError(f"{name}: applies to a backend given as a URL, not to an object")
    given = {"url": backend} if isinstance(backend, str) else {}
    parsed = ReweighterOptions.parse({**given, **options}, stack="trl")
    client = backend if backend is not None and not isinstance(backend, str) else parsed.connect()
    return ReweightedReward(
        reward_funcs=list(reward_funcs),
        backend=client,
        num_generations=num_generations,
        weights=weights,
        num_generations_eval=num_generations_eval,
        options=parsed,
        answer_func=answer_func,
        quality=None if quality is None else [quality] if callable(quality) else list(quality),
    )

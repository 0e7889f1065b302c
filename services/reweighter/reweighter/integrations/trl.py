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
result; each process keeps its own part. One call from one place (rather than one per process)
means one network round trip per step, one batch for the embedder, and no group is ever cut.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..client import Reweighter, connect
from ..types import AdvantageKind, Group, LongTextPolicy, Method, ReweightResult
from ._stacks import prompt_key, reweight_by_key

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
class Timings:
    """Cumulative seconds, so a run can report the share of its wall time spent reweighting."""

    base_s: float = 0.0
    """In the base reward functions (local slice)."""
    reweight_s: float = 0.0
    """Gather + backend call + broadcast: everything reweighting adds to a step."""
    backend_s: float = 0.0
    """The backend call alone (main process)."""
    calls: int = 0
    """Backend calls (one per training step and reward evaluation)."""
    groups: int = 0
    completions: int = 0
    """Groups and completions reweighted, over all calls."""

    def as_dict(self) -> dict[str, float]:
        return dict(self.__dict__)


@dataclass
class _Batch:
    """What every process contributes: its slice, in its order."""

    prompts: list[Any]
    texts: list[str]
    rewards: list[float]
    step: int = 0
    answers: list[str | None] | None = None


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
    method: Method | str = Method.DRA
    params: Mapping[str, Any] = field(default_factory=dict)
    advantages: AdvantageKind | str = AdvantageKind.NONE
    num_generations_eval: int | None = None
    answer_func: RewardFunc | None = None
    """Optional: each completion's canonical final answer (a string, or None where it gives
    none), called like a reward function `f(prompts, completions, **columns)`. Sent as the
    group's `answers`: darling's classes, outcome_ucb's counts, `stats.distinct_answers`."""
    advantage_params: Mapping[str, Any] = field(default_factory=dict)
    """The estimator's parameters, e.g. {"k": 4} with advantages="pass_at_k"."""
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
        self._step = 0
        self.__name__ = self.name  # TRL names reward functions by __name__

    # -- TRL entry point ------------------------------------------------------------------

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any):
        t0 = time.perf_counter()
        base = self._base_rewards(prompts, completions, kwargs)
        answers = self._answers(prompts, completions, kwargs)
        t1 = time.perf_counter()
        # The trainer's global step when TRL passes its state (outcome_ucb counts once per
        # (prompt, step)); else this function's own call count.
        state = kwargs.get("trainer_state")
        step = int(getattr(state, "global_step", self._step) if state is not None else self._step)
        texts = [completion_text(c) for c in completions]
        local = _Batch(list(prompts), texts, base, step, answers)
        out, stats = self._reweight_global(local)
        t2 = time.perf_counter()
        self._step += 1
        self.timings.base_s += t1 - t0
        self.timings.reweight_s += t2 - t1
        self._log(kwargs.get("log_metric"), stats, t2 - t1)
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

    def _base_rewards(self, prompts, completions, kwargs) -> list[float]:
        columns = {k: v for k, v in kwargs.items() if k not in ("log_metric", "log_extra")}
        total = [0.0] * len(completions)
        for func, w in zip(self.reward_funcs, self.weights or (), strict=True):
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
        return total

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

    def _reweight_global(self, local: _Batch) -> tuple[list[float], dict[str, Any]]:
        world, rank = _world()
        if world == 1:
            return self._reweight_slices([local], 0)
        import torch.distributed as dist

        slices: list[Any] = [None] * world
        dist.all_gather_object(slices, local)
        payload: list[Any] = [None]
        if rank == 0:
            try:
                payload[0] = ("ok", self._reweight_all(slices))
            except Exception as e:  # every rank must learn of the failure, or they hang
                payload[0] = ("error", f"{type(e).__name__}: {e}")
        dist.broadcast_object_list(payload, src=0)
        status, value = payload[0]
        if status == "error":
            raise RuntimeError(f"reweighting failed on the main process: {value}")
        rewards, stats = value
        start = sum(len(s.texts) for s in slices[:rank])
        return rewards[start : start + len(local.texts)], stats

    def _reweight_slices(self, slices: list[_Batch], rank: int) -> tuple[list[float], dict]:
        rewards, stats = self._reweight_all(slices)
        start = sum(len(s.texts) for s in slices[:rank])
        return rewards[start : start + len(slices[rank].texts)], stats

    def _reweight_all(self, slices: list[_Batch]) -> tuple[list[float], dict[str, Any]]:
        prompts = [p for s in slices for p in s.prompts]
        texts = [t for s in slices for t in s.texts]
        base = [r for s in slices for r in s.rewards]
        size = self._group_size(prompts)
        step = slices[0].step
        # consecutive runs of `size` (checked to be one prompt each); the key is the group's id
        keys = [f"{step}:{i // size}:{_key(prompts[i - i % size])}" for i in range(len(texts))]
        t0 = time.perf_counter()
        answers = None
        if all(s.answers is not None for s in slices):
            answers = [a for s in slices for a in s.answers or []]
        out = reweight_by_key(
            self.backend,
            keys,
            base,
            texts,
            method=str(self.method),
            params=self.params,
            advantages=str(self.advantages),
            answers=answers,
            prompt_keys=[prompt_key(p) for p in prompts],
            step=step,
            advantage_params=self.advantage_params,
        )
        self.timings.backend_s += time.perf_counter() - t0
        self.timings.calls += 1
        self.timings.groups += out.groups
        self.timings.completions += len(texts)
        assert out.request is not None and out.result is not None  # a non-empty batch
        values = out.advantages if out.advantages is not None else out.rewards
        return values, _stats(list(out.request.groups), out.result)

    def _group_size(self, prompts: list[Any]) -> int:
        """num_generations (train) or num_generations_eval, whichever cuts the batch into
        groups of one prompt each; anything else is a configuration error."""
        keys = [_key(p) for p in prompts]
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

    def _log(self, log_metric: Callable[[str, float], None] | None, stats: dict, secs: float):
        """Through TRL's `log_metric` hook: averaged per logging step next to `reward`, `kl`."""
        if log_metric is None:
            return
        for name in (
            "mean_similarity",
            "effective_size",
            "distinct_answers",
            "classes",
            "frac_zero_advantage",
            "lambda",
            "frac_zero_spread",
            "frac_zero_spread_base",
            "base_reward",
            "reward",
        ):
            if stats.get(name) is not None:
                log_metric(f"reweighter/{name}", float(stats[name]))
        log_metric("reweighter/seconds", secs)


def _spread(values: Sequence[float]) -> float:
    return max(values) - min(values)


def _stats(groups: list[Group], result: ReweightResult) -> dict[str, Any]:
    n = len(groups)
    lams = [g.stats.lambda_ for g in result.groups if g.stats.lambda_ is not None]
    eff = [g.stats.effective_size for g in result.groups if g.stats.effective_size is not None]
    distinct = [
        g.stats.distinct_answers for g in result.groups if g.stats.distinct_answers is not None
    ]
    classes = [g.stats.classes for g in result.groups if g.stats.classes is not None]
    advs = [g.advantages for g in result.groups if g.advantages is not None]
    rewards = [v for g in result.groups for v in g.rewards]
    base = [v for g in groups for v in g.rewards]
    return {
        "mean_similarity": sum(g.stats.mean_similarity for g in result.groups) / n,
        "lambda": sum(lams) / len(lams) if lams else None,
        # Collapse telemetry, per step: means over the step's groups (docs/methods.md).
        "effective_size": sum(eff) / len(eff) if eff else None,
        "distinct_answers": sum(distinct) / len(distinct) if distinct else None,
        "classes": sum(classes) / len(classes) if classes else None,
        "frac_zero_advantage": (
            sum(all(abs(a) < 1e-12 for a in adv) for adv in advs) / len(advs) if advs else None
        ),
        # Groups whose rewards are all equal give GRPO no signal; reweighting can only help when
        # there is spread to reshape, so both shares are worth watching.
        "frac_zero_spread": sum(_spread(g.rewards) <= 1e-12 for g in result.groups) / n,
        "frac_zero_spread_base": sum(_spread(g.rewards) <= 1e-12 for g in groups) / n,
        "base_reward": sum(base) / len(base),
        "reward": sum(rewards) / len(rewards),
        "groups": [g.id for g in groups],
    }


def _world() -> tuple[int, int]:
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover - torch always has it
        return 1, 0
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return 1, 0


def reweighted(
    *reward_funcs: RewardFunc,
    num_generations: int,
    backend: str | Reweighter = "inprocess",
    method: Method | str = Method.DRA,
    params: Mapping[str, Any] | None = None,
    weights: Sequence[float] | None = None,
    advantages: AdvantageKind | str = AdvantageKind.NONE,
    num_generations_eval: int | None = None,
    api_key: str | None = None,
    long_text: LongTextPolicy | str | None = None,
    answer_func: RewardFunc | None = None,
    advantage_params: Mapping[str, Any] | None = None,
) -> ReweightedReward:
    """The one-liner: `reward_funcs=[reweighted(acc, fmt, num_generations=8, backend=URL)]`.

    `backend` is a `reweighter.client.connect` URL ("http://host:port", "grpc://host:port",
    "inprocess" to load the embedding model here) or an object with `reweight(ReweightRequest)`.
    """
    if isinstance(backend, str):
        settings = {"long_text": long_text} if long_text is not None else None
        backend = connect(backend, api_key=api_key, settings=settings)
    elif not callable(getattr(backend, "reweight", None)):
        raise TypeError("backend must be a URL string or an object with a reweight() method")
    return ReweightedReward(
        reward_funcs=list(reward_funcs),
        backend=backend,
        num_generations=num_generations,
        weights=weights,
        method=method,
        params=dict(params or {}),
        advantages=advantages,
        num_generations_eval=num_generations_eval,
        answer_func=answer_func,
        advantage_params=dict(advantage_params or {}),
    )

"""Wire a validated config into TRL's GRPOTrainer with a reweighted reward, train, and report.

The order is deliberate: config, then the Reweighter backend (reachable? knows the method?),
and only then the dataset and the model, so every configuration mistake fails in seconds.
"""

from __future__ import annotations

import json
import os
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from reweighter.client import DEFAULT_TIMEOUT_S, Reweighter
from reweighter.integrations.trl import ReweightedReward
from reweighter.types import ReweightRequest, ReweightResult

from .config import ConfigError, ReweighterSection, TrainConfig, grpo_args
from .rewards import REWARDS, extract_answers
from .trace import RecordingBackend, SliceTrace


def process_rank() -> int:
    """Global rank from the launcher's environment (accelerate/torchrun), before torch init."""
    return int(os.environ.get("RANK", "0"))


class _MainProcessOnly:
    """Stand-in on non-main ranks: the integration only calls the backend on rank 0."""

    def reweight(self, request: ReweightRequest) -> ReweightResult:  # pragma: no cover
        raise RuntimeError("the backend is only called on the main process")


def build_backend(rw: ReweighterSection, rank: int) -> Reweighter:
    """The client of the config's options (`rw.connect()`, as every integration), checked now:
    reachable, ready, offering the method."""
    if rw.backend == "inprocess":
        # One embedding model per job, not per process: only rank 0 ever reweights.
        if rank != 0:
            return _MainProcessOnly()  # type: ignore[return-value]
        client = rw.connect()
        client.info()  # loads the model now, before the dataset and the policy
        return client
    key = "url" if rw.url else "grpc"
    try:
        backend = rw.connect()
        info = backend.info()
        wait_ready = getattr(backend, "wait_ready", None)
        if callable(wait_ready):  # reachable but still loading its model: wait, don't 503
            wait_ready(timeout=rw.timeout_s or DEFAULT_TIMEOUT_S)
    except Exception as e:
        raise ConfigError(
            f"reweighter.{key}: cannot reach the Reweighter at {rw.target}: {type(e).__name__}: {e}"
        ) from e
    methods = info.get("methods") if isinstance(info, dict) else None
    if methods and rw.method not in methods:
        raise ConfigError(
            f"reweighter.method: the service at {rw.target} does not offer {rw.method!r} "
            f"(it offers {sorted(methods)})"
        )
    return backend


def model_path(cfg: TrainConfig) -> str:
    """A local directory (tiny model built, SmolLM2 converted, on first use) or a hub name."""
    if cfg.model.tiny is not None:
        from .tiny_model import tiny_model_path

        return str(tiny_model_path(cfg.model.tiny))
    if cfg.model.smollm2 is not None:
        from .policy import PolicyUnavailable, smollm2_path

        try:
            return str(smollm2_path(**cfg.model.smollm2))
        except PolicyUnavailable as e:
            raise ConfigError(f"model.smollm2: {e}") from e
    return str(cfg.model.name_or_path)


def weight_sync_route(cfg: TrainConfig, args: Any) -> str | None:
    """None (generation in this process), "nccl" (TRL's own sync) or "gloo" (the CPU route)."""
    if not (args.use_vllm and args.vllm_mode == "server"):
        return None
    if cfg.rollout.weight_sync != "auto":
        return cfg.rollout.weight_sync
    import torch

    return "nccl" if torch.cuda.is_available() and not args.use_cpu else "gloo"


def generation_summary(cfg: TrainConfig, trainer: Any) -> dict[str, Any]:
    """Where the completions came from and how often the rollout server got new weights."""
    route = weight_sync_route(cfg, trainer.args)
    if route is None:
        where = "vllm colocate" if trainer.args.use_vllm else "in-process transformers.generate"
        return {"generation": where}
    client = getattr(getattr(trainer, "vllm_generation", None), "vllm_client", None)
    out: dict[str, Any] = {
        "generation": f"rollout server {getattr(client, 'base_url', '?')}",
        "weight_sync": route,
    }
    if route == "gloo" and client is not None:
        out.update(weight_syncs=client.syncs, weight_sync_s=client.sync_s,
                   weight_sync_bytes=client.sync_bytes)  # fmt: skip
    return out


PICK_TASKS = ("pickone", "picktwo")


def pick_answers(prompts: Any, completions: Any, answer: Any, check: Any = None, **_: Any
                 ) -> list[str | None]:
    """The pick tasks' exact answers ("april+june", right or wrong; None when a completion
    names none), sent as each group's `answers`: darling's answer classes and the service's
    `stats.distinct_answers`. Other methods ignore them."""
    return extract_answers(completions, answer, check)


def build_reward(
    cfg: TrainConfig, args: Any, backend: Any, on_result: Any = None
) -> ReweightedReward:
    """The reweighted reward of a config: its `rewards` with their weights, its options, the
    pick tasks' answers, and `reweighter.quality_reward`'s functions as the quality terms."""
    quality = [REWARDS[name] for name in cfg.reweighter.quality_rewards]
    return ReweightedReward(
        reward_funcs=[REWARDS[name] for name in cfg.rewards],
        weights=list(cfg.rewards.values()),
        backend=backend,
        num_generations=args.num_generations,
        num_generations_eval=args.num_generations_eval,
        options=cfg.reweighter,  # method, params, advantages, advantage_params
        answer_func=pick_answers if cfg.dataset.name in PICK_TASKS else None,
        on_result=on_result,
        quality=quality or None,
    )


def build_trainer(cfg: TrainConfig) -> tuple[Any, ReweightedReward]:
    """GRPOTrainer with the reweighted reward, checked in the order above; not yet trained."""
    args = grpo_args(cfg)
    rank = process_rank()
    backend = build_backend(cfg.reweighter, rank)
    on_result = None
    if cfg.reweighter.trace_dir:
        trace_dir = Path(cfg.reweighter.trace_dir)
        trace_dir.mkdir(parents=True, exist_ok=True)
        if rank == 0:
            backend = RecordingBackend(backend, trace_dir / "requests.jsonl")
        on_result = SliceTrace(trace_dir, rank)
    reward = build_reward(cfg, args, backend, on_result)

    # Only now the heavy parts.
    from transformers import AutoTokenizer
    from trl import GRPOTrainer

    from .data import load_dataset

    dataset = load_dataset(cfg.dataset.name, cfg.dataset.split, cfg.dataset.limit)
    path = model_path(cfg)
    tokenizer = AutoTokenizer.from_pretrained(path)
    sync = nullcontext()
    if weight_sync_route(cfg, args) == "gloo":
        from .rollout.client import gloo_weight_sync

        sync = gloo_weight_sync(cfg.rollout.sync_address, cfg.rollout.sync_timeout_s)
    with sync:
        trainer = GRPOTrainer(
            model=path,
            reward_funcs=[reward],
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
        )
    return trainer, reward


def run(cfg: TrainConfig) -> dict[str, Any]:
    started = time.perf_counter()
    trainer, reward = build_trainer(cfg)
    args = trainer.args
    train_started = time.perf_counter()
    trainer.train()
    train_s = time.perf_counter() - train_started
    t = reward.timings
    summary = {
        "backend": cfg.reweighter.backend,
        "method": cfg.reweighter.method,
        "steps": trainer.state.global_step,
        "process_wall_s": time.perf_counter() - started,
        "train_wall_s": train_s,
        **t.as_dict(),
        "reweight_share": t.reweight_s / train_s if train_s > 0 else 0.0,
        **generation_summary(cfg, trainer),
    }
    if trainer.accelerator.is_main_process:
        out = Path(args.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "reweighter_summary.json").write_text(json.dumps(summary, indent=2))
        (out / "log_history.json").write_text(json.dumps(trainer.state.log_history, indent=2))
        print("reweighter-train summary: " + json.dumps(summary), flush=True)
    return summary

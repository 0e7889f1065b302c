"""verl: a reward-loop reward manager that reweights each sample within its `uid` group.

    reward.reward_manager.source=importlib \\
    reward.reward_manager.name=ReweighterRewardManager \\
    reward.reward_manager.module.path=pkg://reweighter.integrations.verl \\
    +reward.reweighter.url=http://reweighter:8080

verl's reward loop calls `run_single` once per sample, on several Ray actors, in any order; the
n siblings of one prompt share its `uid`. So every sample is sent to the service's group
assembly as a member of group `uid` with `group_size = actor_rollout_ref.rollout.n`, and the
call returns once all n are in, with this sample's reweighted reward. The base reward comes from
a registered verl manager (`reward.reweighter.base`, default "naive") with the usual
`custom_reward_function`; verl's GRPO then computes advantages from the reweighted rewards.

Member ids, and so the member order (the group is reweighted in member_id order): verl 0.9's
agent loop gives every sample of a step a `priority` (its position in the repeated batch, so
siblings are consecutive in rollout order) and it reaches `run_single`. The member id is that
number, zero-padded, then a digest of the response text: the order is the rollout order on
every run, whatever the arrival order, and a retried sample is the same member. Name another
per-sample column with `reward.reweighter.member_key` to use it instead (do so if your data sets
its own `priority` per prompt: siblings with the same priority and the same text would be one
member). Without either (older verl), the id is the digest plus a random suffix: the order is
by content, and only identical texts are ordered at random.

Validation: verl does not tell `run_single` it is validating, and validation repeats prompts
`val_kwargs.n` times under their own uids. A sample counts as validation when its batch's
`meta_info["validate"]` is set (colocated reward path) or its `extra_info["split"]` is one of
`reward.reweighter.val_splits` (verl's data preprocessors write "test"); its raw reward passes
through. Every answer adds `reweighter_raw`, `reweighter_complete` and
`reweighter_similarity` to `reward_extra_info` (the same keys on every sample, as verl needs).

Steps: each member carries verl's global step where the reward loop has it (`_step`: the batch's
`meta_info["global_steps"]`, else the rollout server's `global_steps` in `tool_extra_fields`), so
the service's live page (/dashboard) plots verl's steps and its collapse alert can fire.

Quality apart from the rest (docs/methods.md): `reward.reweighter.quality_key` names the key of
the base scorer's score dict that holds the sample's quality (e.g. `acc`: verl's math_dapo
returns {"score": +1 or -1, "acc": correct, "pred": ...}); its value is sent as the member's
`quality`, so the method reweights only it and adds the rest (score - quality: a format term,
DAPO's -1 for a wrong answer) back unchanged. Unset (the default), no quality is sent: the whole
score is reweighted, as the papers do. A sample whose score lacks the key, or holds no finite
number there, is refused naming the setting (every member of a group gives quality or none
does). verl's naive manager sets `acc` to the score itself when the scorer returns a number:
name `acc` only with a scorer that returns a dict.

Other `reward.reweighter` keys: url (any `reweighter.client.connect` URL, default
http://127.0.0.1:8080), method, params, api_key (ReweighterOptions, integrations/options.py,
checked on load: a bad one is refused naming its key), timeout_s (a member's wait; the server
default if unset), group_size (default rollout.n).
"""

from __future__ import annotations

import hashlib
import logging
import math
import uuid
from collections.abc import Mapping
from typing import Any

import numpy as np
from verl import DataProto
from verl.experimental.reward_loop.reward_manager import get_reward_manager_cls
from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase

from reweighter.client import Reweighter
from reweighter.integrations.options import ReweighterOptions

DEFAULT_VAL_SPLITS = ("test", "val", "validation")
VERL_KEYS = ("base", "group_size", "timeout_s", "member_key", "val_splits", "quality_key")
"""reward.reweighter keys of verl's own; every other key is a ReweighterOptions option.
`timeout_s` here is how long a sample waits for its group (the call waits that plus a
margin), not the options' per-call bound."""
log = logging.getLogger(__name__)
_HINTS = {
    "short": "fewer than group_size samples of this uid arrived within timeout_s: "
    "check that reward.reweighter.group_size (default actor_rollout_ref.rollout.n) is the "
    "number of samples per prompt, and that timeout_s covers the slowest sibling",
    "computing": "the group was whole but still being reweighted at the deadline: "
    "raise reward.reweighter.timeout_s",
}


def _settings(config: Any) -> dict[str, Any]:
    raw = config.reward.get("reweighter") if "reward" in config else None
    if raw is None:
        return {}
    try:
        from omegaconf import OmegaConf

        return dict(OmegaConf.to_container(raw, resolve=True))  # type: ignore[arg-type]
    except (ImportError, ValueError):
        return dict(raw)


def verl_options(cfg: Mapping[str, Any]) -> ReweighterOptions:
    """The connection and the request from `reward.reweighter`: every key but verl's own
    (VERL_KEYS) is a ReweighterOptions option, named as verl's key in errors; an unknown key,
    or one verl cannot honour (advantages), is refused naming it."""
    shared = {k: v for k, v in cfg.items() if k not in VERL_KEYS}
    for k in ("params", "advantage_params"):
        if shared.get(k) is not None:
            shared[k] = dict(shared[k])
    return ReweighterOptions.parse(shared, lambda k: f"reward.reweighter.{k}", stack="verl")


class ReweighterRewardManager(RewardManagerBase):
    """verl's base reward, reweighted by DRA/MMR over the sample's `uid` group."""

    def __init__(
        self,
        config: Any,
        tokenizer: Any,
        compute_score: Any,
        reward_router_address: str | None = None,
        reward_model_tokenizer: Any = None,
        backend: Reweighter | None = None,
    ) -> None:
        super().__init__(config, tokenizer, compute_score)
        cfg = _settings(config)
        base_cls = get_reward_manager_cls(cfg.get("base", "naive"))
        self.base = base_cls(
            config,
            tokenizer,
            compute_score,
            reward_router_address=reward_router_address,
            reward_model_tokenizer=reward_model_tokenizer,
        )
        self.group_size = int(cfg.get("group_size") or config.actor_rollout_ref.rollout.n)
        self.options = verl_options(cfg)
        self.method = self.options.method
        self.params: Mapping[str, Any] = self.options.params
        self.timeout_s: float | None = cfg.get("timeout_s")  # a member's wait, not a call's
        self.member_key: str | None = cfg.get("member_key")
        self.val_splits = tuple(cfg.get("val_splits") or DEFAULT_VAL_SPLITS)
        self.quality_key: str | None = cfg.get("quality_key")
        if self.quality_key is not None and not (
            isinstance(self.quality_key, str) and self.quality_key
        ):
            raise ValueError(
                "reward.reweighter.quality_key: the name of a key of the score dict (e.g. acc), "
                f"got {self.quality_key!r}"
            )
        self._backend = backend
        self._warned: set[tuple[str, int]] = set()

    @property
    def backend(self) -> Reweighter:
        if self._backend is None:  # on first use: a manager that only validates opens nothing
            self._backend = self.options.connect()
        return self._backend

    def member_id(self, ntb: Mapping[str, Any], text: str) -> str:
        """This sample's id in its group; ids sort in the documented member order."""
        if self.member_key and self.member_key in ntb:
            return str(ntb[self.member_key])
        digest = hashlib.sha256(text.encode()).hexdigest()[:24]
        if "priority" in ntb:
            return f"p{int(ntb['priority']):012d}-{digest}"
        return f"c{digest}-{uuid.uuid4().hex[:8]}"

    def _is_validation(self, data: DataProto, ntb: Mapping[str, Any]) -> bool:
        if data.meta_info.get("validate", False):
            return True
        extra = ntb.get("extra_info")
        return isinstance(extra, Mapping) and extra.get("split") in self.val_splits

    def _response_text(self, item: Any) -> str:
        # As verl's NaiveRewardManager: the valid (unpadded) response tokens, decoded.
        ids = item.batch["responses"]
        valid = int(item.batch["attention_mask"][-ids.shape[-1] :].sum())
        return self.tokenizer.decode(ids[:valid], skip_special_tokens=True)

    async def run_single(self, data: DataProto) -> dict:
        base = await self.base.run_single(data)
        raw = float(base["reward_score"])
        extra = dict(base.get("reward_extra_info") or {})
        item = data[-1]  # multi-sequence outputs: verl scores the last sequence
        ntb = item.non_tensor_batch
        if self.group_size < 2 or self._is_validation(data, ntb):
            extra.update(
                reweighter_raw=raw, reweighter_complete=0.0, reweighter_similarity=math.nan
            )
            return {"reward_score": raw, "reward_extra_info": extra}
        text = await self.loop.run_in_executor(None, self._response_text, item)
        result = await self.backend.submit_member_async(
            str(ntb["uid"]),
            self.member_id(ntb, text),
            self.group_size,
            raw,
            completion=text,
            method=self.method,
            params=self.params,
            advantages="none",
            timeout_s=self.timeout_s,
            answer=_answer(extra),
            quality=_quality(extra, self.quality_key),
            step=_step(data, ntb),
        )
        if not result.complete:
            self._warn_incomplete(result)
        extra.update(
            reweighter_raw=raw,
            reweighter_complete=float(result.complete),
            reweighter_similarity=result.stats.mean_similarity if result.stats else math.nan,
        )
        return {"reward_score": float(result.reward), "reward_extra_info": extra}

    def _warn_incomplete(self, result: Any) -> None:
        """One WARNING per answered-incomplete group round, in verl's own log: the sample
        trains on its raw reward, and a wrong group size shows nowhere else on this side."""
        key = (result.group_id, result.round)
        if key in self._warned:
            return
        if len(self._warned) > 10_000:
            self._warned.clear()
        self._warned.add(key)
        reason = str(result.reason)
        log.warning(
            "reweighter: uid %s (round %d) was answered %s with %d of %d members; its samples "
            "keep their raw reward. %s",
            result.group_id,
            result.round,
            reason,
            result.members,
            self.group_size,
            _HINTS.get(reason, "see docs/integrations.md, failure modes"),
        )


def _step(data: DataProto, ntb: Mapping[str, Any]) -> int | None:
    """verl's global step, where its reward loop has it (the dashboard's x axis): the batch's
    `meta_info["global_steps"]` (what RayPPOTrainer sets on the generation batch), else the
    `global_steps` the rollout server stamps on every generation since its last weight update
    (verl 0.9's vLLM, SGLang and TRT-LLM servers; it reaches `run_single` in the agent loop's
    `tool_extra_fields` column). None (the service counts it towards the latest step) when
    neither is set."""
    for value in (data.meta_info.get("global_steps"), _extra_step(ntb.get("tool_extra_fields"))):
        if isinstance(value, int | np.integer) and not isinstance(value, bool) and value >= 0:
            return int(value)
    return None


def _extra_step(fields: Any) -> Any:
    return fields.get("global_steps") if isinstance(fields, Mapping) else None


def _quality(extra: Mapping[str, Any], key: str | None) -> float | None:
    """The sample's quality: its score dict's `key` (reward.reweighter.quality_key), as a
    number (verl's math_dapo `acc` is a bool: 1.0 or 0.0); None when no key is set."""
    if key is None:
        return None
    if key not in extra:
        keys = ", ".join(sorted(str(k) for k in extra)) or "none"
        raise ValueError(
            f"reward.reweighter.quality_key: the score has no {key!r} (its keys: {keys}); "
            "the base scorer must return a dict with it for every sample"
        )
    value = extra[key]
    if isinstance(value, np.generic):
        value = value.item()
    if not isinstance(value, bool | int | float) or not math.isfinite(float(value)):
        raise ValueError(
            f"reward.reweighter.quality_key: the score's {key!r} is {value!r}, not a finite number"
        )
    return float(value)


def _answer(extra: Mapping[str, Any]) -> str | None:
    """The sample's extracted final answer, where verl's scorer reports one: `pred` (what
    verl's math_dapo and other compute_score functions return beside `score`), else `answer`."""
    for key in ("pred", "answer"):
        value = extra.get(key)
        if isinstance(value, str) and value:
            return value[:4096]
    return None

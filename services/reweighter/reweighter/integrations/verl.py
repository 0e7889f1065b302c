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

Member ids: verl hands `run_single` no per-sample id (siblings share `uid` and every
non-tensor field), so each call draws a fresh one and the client's retries reuse it. If your
data carries a per-sample id, name it with `reward.reweighter.member_key` and it is used instead.

Validation: verl does not tell `run_single` it is validating, and validation repeats prompts
`val_kwargs.n` times under their own uids. A sample counts as validation when its batch's
`meta_info["validate"]` is set (colocated reward path) or its `extra_info["split"]` is one of
`reward.reweighter.val_splits` (verl's data preprocessors write "test"); its raw reward passes
through. Every answer adds `reweighter_raw`, `reweighter_complete` and
`reweighter_similarity` to `reward_extra_info` (the same keys on every sample, as verl needs).

Other `reward.reweighter` keys: method, params, api_key, timeout_s (the server default if
unset), group_size (default rollout.n).
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping
from typing import Any

from verl import DataProto
from verl.experimental.reward_loop.reward_manager import get_reward_manager_cls
from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase

from reweighter.integrations._stacks import MemberBackend, member_backend_from

DEFAULT_VAL_SPLITS = ("test", "val", "validation")


def _settings(config: Any) -> dict[str, Any]:
    raw = config.reward.get("reweighter") if "reward" in config else None
    if raw is None:
        return {}
    try:
        from omegaconf import OmegaConf

        return dict(OmegaConf.to_container(raw, resolve=True))  # type: ignore[arg-type]
    except (ImportError, ValueError):
        return dict(raw)


class ReweighterRewardManager(RewardManagerBase):
    """verl's base reward, reweighted by DRA/MMR over the sample's `uid` group."""

    def __init__(
        self,
        config: Any,
        tokenizer: Any,
        compute_score: Any,
        reward_router_address: str | None = None,
        reward_model_tokenizer: Any = None,
        backend: MemberBackend | None = None,
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
        self.method = str(cfg.get("method", "dra"))
        self.params: Mapping[str, Any] = dict(cfg.get("params") or {})
        self.timeout_s: float | None = cfg.get("timeout_s")
        self.member_key: str | None = cfg.get("member_key")
        self.val_splits = tuple(cfg.get("val_splits") or DEFAULT_VAL_SPLITS)
        self._backend = backend
        self._url = str(cfg.get("url", "http://127.0.0.1:8080"))
        self._api_key: str | None = cfg.get("api_key")

    @property
    def backend(self) -> MemberBackend:
        # Made on first use, inside the worker's event loop (async clients bind to it).
        if self._backend is None:
            self._backend = member_backend_from(self._url, api_key=self._api_key)
        return self._backend

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
        if self.member_key and self.member_key in ntb:
            member_id = str(ntb[self.member_key])
        else:
            member_id = uuid.uuid4().hex
        text = await self.loop.run_in_executor(None, self._response_text, item)
        result = await self.backend.submit_member(
            str(ntb["uid"]),
            member_id,
            self.group_size,
            raw,
            completion=text,
            method=self.method,
            params=self.params,
            advantages="none",
            timeout_s=self.timeout_s,
        )
        extra.update(
            reweighter_raw=raw,
            reweighter_complete=float(result.complete),
            reweighter_similarity=result.stats.mean_similarity if result.stats else math.nan,
        )
        return {"reward_score": float(result.reward), "reward_extra_info": extra}

"""ReweightEngine: validate, embed (dedupe, cache, batch), reweight, compute advantages.

This is the only place the service's rules live. HTTP, gRPC, the CLI and the in-process TRL
integration all call it; a transport converts its wire format to `reweighter.types` and back.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from pydantic import BaseModel, ValidationError

from . import __version__
from .config import Settings
from .embedding.base import Embedder
from .errors import InvalidInput, LimitExceeded, NotReady
from .methods import ADVANTAGE_KINDS, METHODS, advantages, cosine_similarity, get_method
from .methods import mean_pairwise_similarity as _mean_pairwise_similarity
from .types import EmbedResult, GroupResult, GroupStats, ReweightRequest, ReweightResult

# Requests up to this many completions run their tensor math on the event loop: it takes well
# under a millisecond, less than a thread hop. Larger ones go to a worker thread.
_INLINE_MATH_LIMIT = 256


@dataclass(frozen=True)
class _Checked:
    """A validated request: parsed params and, per group, either texts or an embedding array."""

    method: str
    params: BaseModel
    advantages: str
    texts: list[list[str] | None]
    embeddings: list[np.ndarray | None]
    rewards: list[list[float]]
    ids: list[str | None]


def _param_field(err: dict[str, Any]) -> str:
    loc = ".".join(str(p) for p in err.get("loc", ()) if p != "__root__")
    return f"params.{loc}" if loc else "params"


class ReweightEngine:
    """Groups of (completions | embeddings, rewards) in, reweighted rewards and statistics out."""

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        embedder: Embedder | None = None,
        method_device: str | None = None,
    ) -> None:
        self.settings = settings or Settings()
        self._embedder = embedder
        self._load_lock = threading.Lock()
        # The method math runs where the encoder does unless told otherwise: on a GPU host the
        # similarity bmm and the MMR loop then never leave the device.
        method_device = method_device or self.settings.device
        if method_device == "auto":
            method_device = "cuda" if torch.cuda.is_available() else "cpu"
        self.method_device = torch.device(method_device)

    # -- lifecycle -------------------------------------------------------------------------

    def load(self) -> None:
        """Build the embedder (loads the model). Idempotent and thread-safe."""
        if self._embedder is not None:
            return
        with self._load_lock:
            if self._embedder is None:
                from .embedding import build_embedder

                self._embedder = build_embedder(self.settings)

    @property
    def ready(self) -> bool:
        return self._embedder is not None

    @property
    def embedder(self) -> Embedder | None:
        return self._embedder

    def _require_embedder(self, *, lazy: bool) -> Embedder:
        if self._embedder is None:
            if not lazy:
                raise NotReady("the embedding model is still loading; retry shortly")
            self.load()
        assert self._embedder is not None
        return self._embedder

    async def aclose(self) -> None:
        if self._embedder is not None:
            await self._embedder.aclose()

    def close(self) -> None:
        if self._embedder is not None:
            self._embedder.close()

    # -- public API ------------------------------------------------------------------------

    def reweight(self, request: ReweightRequest) -> ReweightResult:
        """Synchronous path (CLI, in-process trainer): loads the model on first use."""
        checked = self._check(request)
        vectors = self._embed_groups_sync(checked)
        return self._finish(checked, vectors)

    async def areweight(self, request: ReweightRequest) -> ReweightResult:
        """Async path for the transports: embedding goes through the dynamic batcher."""
        checked = self._check(request)
        texts = _flatten(checked.texts)
        if texts:
            flat = await self._require_embedder(lazy=False).aencode(texts)
            vectors = _split(checked, flat)
        else:
            vectors = _split(checked, None)
        if sum(len(r) for r in checked.rewards) <= _INLINE_MATH_LIMIT:
            return self._finish(checked, vectors)
        return await asyncio.to_thread(self._finish, checked, vectors)

    def embed(self, texts: Sequence[str]) -> EmbedResult:
        self._check_texts(texts)
        embedder = self._require_embedder(lazy=True)
        return EmbedResult(embedder.model_id, embedder.dim, embedder.encode(list(texts)))

    async def aembed(self, texts: Sequence[str]) -> EmbedResult:
        self._check_texts(texts)
        embedder = self._require_embedder(lazy=False)
        return EmbedResult(embedder.model_id, embedder.dim, await embedder.aencode(list(texts)))

    def validate(self, request: ReweightRequest) -> None:
        """Raise InvalidInput / LimitExceeded exactly as reweight would, without doing any work."""
        self._check(request)

    def info(self) -> dict[str, Any]:
        s = self.settings
        emb = self._embedder
        return {
            "version": __version__,
            "model": emb.model_id if emb else None,
            "dim": emb.dim if emb else None,
            "device": emb.device if emb else None,
            "ready": emb is not None,
            "long_text": s.long_text,
            "methods": {
                name: {
                    "description": spec.description,
                    "params": spec.params_model.model_json_schema(by_alias=True),
                }
                for name, spec in METHODS.items()
            },
            "advantages": list(ADVANTAGE_KINDS),
            "limits": {
                "max_groups": s.max_groups,
                "max_group_size": s.max_group_size,
                "max_completions": s.max_completions,
                "max_chars": s.max_chars,
            },
        }

    # -- validation ------------------------------------------------------------------------

    def _check_texts(self, texts: Sequence[str]) -> None:
        s = self.settings
        if isinstance(texts, str) or not isinstance(texts, Sequence):
            raise InvalidInput("must be a list of strings", field="inputs")
        if not texts:
            raise InvalidInput("must not be empty", field="inputs")
        if len(texts) > s.max_completions:
            raise LimitExceeded(
                f"{len(texts)} inputs exceed the limit of {s.max_completions}", field="inputs"
            )
        chars = 0
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise InvalidInput("must be a string", field=f"inputs[{i}]")
            chars += len(t)
        if chars > s.max_chars:
            raise LimitExceeded(
                f"{chars} characters exceed the limit of {s.max_chars}", field="inputs"
            )

    def _check(self, request: ReweightRequest) -> _Checked:
        s = self.settings
        try:
            spec = get_method(request.method)
        except (ValueError, TypeError) as e:
            raise InvalidInput(str(e), field="method") from e
        params_in = request.params or {}
        if not isinstance(params_in, dict):
            params_in = dict(params_in)
        try:
            params = spec.params_model.model_validate(params_in)
        except ValidationError as e:
            first = e.errors()[0]
            raise InvalidInput(
                f"{first['msg']} (method {spec.name!r} takes: "
                f"{', '.join(_param_names(spec.params_model)) or 'no parameters'})",
                field=_param_field(first),
            ) from e
        if request.advantages not in ADVANTAGE_KINDS:
            raise InvalidInput(
                f"unknown advantage kind {request.advantages!r}; expected one of "
                f"{', '.join(ADVANTAGE_KINDS)}",
                field="advantages",
            )

        groups = request.groups
        if not groups:
            raise InvalidInput("at least one group is required", field="groups")
        if len(groups) > s.max_groups:
            raise LimitExceeded(
                f"{len(groups)} groups exceed the limit of {s.max_groups}", field="groups"
            )
        total = sum(len(g.rewards) for g in groups)
        if total > s.max_completions:
            raise LimitExceeded(
                f"{total} completions exceed the limit of {s.max_completions}", field="groups"
            )

        texts: list[list[str] | None] = []
        embs: list[np.ndarray | None] = []
        rewards: list[list[float]] = []
        chars = 0
        for gi, g in enumerate(groups):
            where = f"groups[{gi}]"
            r = _check_rewards(g.rewards, f"{where}.rewards")
            if len(r) > s.max_group_size:
                raise LimitExceeded(
                    f"{len(r)} completions exceed the group limit of {s.max_group_size}",
                    field=f"{where}.rewards",
                )
            has_c, has_e = g.completions is not None, g.embeddings is not None
            if has_c == has_e:
                raise InvalidInput(
                    "give either completions or embeddings, not both"
                    if has_c
                    else "give either completions or embeddings",
                    field=where,
                )
            if has_c:
                c = g.completions
                if isinstance(c, str) or not isinstance(c, Sequence):
                    raise InvalidInput("must be a list of strings", field=f"{where}.completions")
                if len(c) != len(r):
                    raise InvalidInput(
                        f"has {len(c)} items but rewards has {len(r)}",
                        field=f"{where}.completions",
                    )
                for ci, t in enumerate(c):
                    if not isinstance(t, str):
                        raise InvalidInput("must be a string", field=f"{where}.completions[{ci}]")
                    chars += len(t)
                texts.append(list(c))
                embs.append(None)
            else:
                embs.append(_check_embeddings(g.embeddings, len(r), f"{where}.embeddings"))
                texts.append(None)
            rewards.append(r)
        if chars > s.max_chars:
            raise LimitExceeded(
                f"{chars} characters exceed the limit of {s.max_chars}", field="groups"
            )
        return _Checked(
            method=spec.name,
            params=params,
            advantages=request.advantages,
            texts=texts,
            embeddings=embs,
            rewards=rewards,
            ids=[g.id for g in groups],
        )

    # -- work ------------------------------------------------------------------------------

    def _embed_groups_sync(self, checked: _Checked) -> list[np.ndarray]:
        texts = _flatten(checked.texts)
        if not texts:
            return _split(checked, None)
        return _split(checked, self._require_embedder(lazy=True).encode(texts))

    def _finish(self, checked: _Checked, vectors: list[np.ndarray]) -> ReweightResult:
        spec = METHODS[checked.method]
        dev = self.method_device
        b = len(vectors)
        g_max = max(len(r) for r in checked.rewards)
        with torch.inference_mode():
            rewards = torch.zeros(b, g_max, dtype=torch.float32, device=dev)
            mask = torch.zeros(b, g_max, dtype=torch.bool, device=dev)
            for i, r in enumerate(checked.rewards):
                rewards[i, : len(r)] = torch.tensor(r, dtype=torch.float32)
                mask[i, : len(r)] = True
            sim = _batched_similarity(vectors, g_max, dev)
            new, lam = spec.apply(rewards, sim, mask, checked.params)
            adv = (
                advantages(new, checked.advantages, mask=mask)
                if checked.advantages != "none"
                else None
            )
            mean_sim = _mean_pairwise_similarity(sim, mask)
            new_l, mean_l = new.cpu().tolist(), mean_sim.cpu().tolist()
            adv_l = adv.cpu().tolist() if adv is not None else None
            lam_l = lam.cpu().tolist() if lam is not None else None

        out = []
        for i, r in enumerate(checked.rewards):
            n = len(r)
            out.append(
                GroupResult(
                    id=checked.ids[i],
                    rewards=new_l[i][:n],
                    advantages=adv_l[i][:n] if adv_l is not None else None,
                    stats=GroupStats(
                        mean_similarity=mean_l[i],
                        lambda_=lam_l[i] if lam_l is not None else None,
                    ),
                )
            )
        uses_model = any(t is not None for t in checked.texts)
        model = self._embedder.model_id if uses_model and self._embedder else None
        return ReweightResult(method=checked.method, model=model, groups=out)


# -- helpers -------------------------------------------------------------------------------


def _param_names(model: type[BaseModel]) -> list[str]:
    return [f.alias or name for name, f in model.model_fields.items()]


def _check_rewards(values: Any, field: str) -> list[float]:
    if isinstance(values, str | bytes) or not isinstance(values, Sequence | np.ndarray):
        raise InvalidInput("must be a list of numbers", field=field)
    if len(values) == 0:
        raise InvalidInput("empty group: at least one completion is required", field=field)
    out = []
    for j, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, int | float | np.floating | np.integer):
            raise InvalidInput(f"must be a number, got {type(v).__name__}", field=f"{field}[{j}]")
        f = float(v)
        if not math.isfinite(f):
            raise InvalidInput(f"must be finite, got {f}", field=f"{field}[{j}]")
        out.append(f)
    return out


def _check_embeddings(values: Any, n: int, field: str) -> np.ndarray:
    try:
        arr = np.asarray(values, dtype=np.float32)
    except (TypeError, ValueError) as e:
        raise InvalidInput("must be a list of equal-length lists of numbers", field=field) from e
    if arr.ndim != 2:
        raise InvalidInput(
            "must be a list of equal-length lists of numbers (one vector per completion)",
            field=field,
        )
    if arr.shape[0] != n:
        raise InvalidInput(f"has {arr.shape[0]} vectors but rewards has {n}", field=field)
    if arr.shape[1] == 0:
        raise InvalidInput("vectors must have at least one dimension", field=field)
    finite = np.isfinite(arr).all(axis=1)
    if not finite.all():
        j = int(np.argmin(finite))
        raise InvalidInput("contains NaN or infinity", field=f"{field}[{j}]")
    norms = np.linalg.norm(arr, axis=1)
    if (norms == 0).any():
        j = int(np.argmin(norms))
        raise InvalidInput(
            "is a zero vector: cosine similarity is undefined", field=f"{field}[{j}]"
        )
    return arr


def _flatten(texts: list[list[str] | None]) -> list[str]:
    return [t for group in texts if group is not None for t in group]


def _split(checked: _Checked, flat: np.ndarray | None) -> list[np.ndarray]:
    """Per-group vectors: slices of the flat text embeddings, or the given embeddings."""
    out: list[np.ndarray] = []
    pos = 0
    for texts, emb in zip(checked.texts, checked.embeddings, strict=True):
        if texts is not None:
            assert flat is not None
            out.append(flat[pos : pos + len(texts)])
            pos += len(texts)
        else:
            assert emb is not None
            out.append(emb)
    return out


def _batched_similarity(vectors: list[np.ndarray], g_max: int, dev: torch.device) -> torch.Tensor:
    """[B, G, G] cosine similarities; groups are bucketed by dimension so each bucket is one bmm."""
    b = len(vectors)
    sim = torch.zeros(b, g_max, g_max, dtype=torch.float32, device=dev)
    by_dim: dict[int, list[int]] = {}
    for i, v in enumerate(vectors):
        by_dim.setdefault(v.shape[1], []).append(i)
    for d, idx in by_dim.items():
        emb = torch.zeros(len(idx), g_max, d, dtype=torch.float32)
        mask = torch.zeros(len(idx), g_max, dtype=torch.bool)
        for k, i in enumerate(idx):
            n = vectors[i].shape[0]
            emb[k, :n] = torch.from_numpy(np.ascontiguousarray(vectors[i], dtype=np.float32))
            mask[k, :n] = True
        sim[torch.tensor(idx, device=dev)] = cosine_similarity(emb.to(dev), mask.to(dev))
    return sim

"""Pass@k advantages (Chen et al., "Pass@k Training for Adaptively Balancing Exploration and
Exploitation of Large Reasoning Models", arXiv 2508.10751; code RUCAIBox/Passk_Training).

A closed form of the advantage that optimises pass@k (the chance that at least one of k samples
succeeds) instead of pass@1. With n valid completions in a group, c of them successes (reward
>= `success_threshold`):

    rho   = 1 - C(n - c, k) / C(n, k)              the group's pass@k estimate
    sigma = sqrt(rho * (1 - rho))
    A_success = (1 - rho) / sigma
    A_failure = (1 - rho - C(n - c - 1, k - 1) / C(n - 1, k - 1)) / sigma

A group where sigma = 0 gets 0 everywhere: all successes (rho = 1), all failures (rho = 0), and
also any group with fewer than k failures (every k-subset holds a success, so rho = 1: the
group's pass@k cannot improve). With k = 1, rho is the success rate p, A_success =
(1 - p) / sqrt(p (1 - p)) and A_failure = -p / sqrt(p (1 - p)): GRPO on 0/1 rewards with the
population std and no epsilon.

Against the authors' code (code/passk_adv.py): the same formula; they divide by sigma + 1e-6
and test success as `reward == 1`; we divide by sigma exactly (0 where sigma is 0, which is what
their epsilon gives there too) and take a threshold, so rewards such as 0.9/1.1 or a format
bonus still split into success and failure. Binomials are computed as exp(lgamma) in float64.
"""

from __future__ import annotations

import torch

from reweighter.errors import InvalidInput
from reweighter.methods import _checks
from reweighter.methods.params import PassAtKParams, kernel_params


def _log_comb(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """log C(a, b), -inf where b < 0 or b > a (C = 0 there)."""
    ok = (b >= 0) & (b <= a)
    a_, b_ = a.clamp_min(0), b.clamp(min=0)
    lc = torch.lgamma(a_ + 1) - torch.lgamma(b_ + 1) - torch.lgamma((a_ - b_).clamp_min(0) + 1)
    return torch.where(ok, lc, torch.full_like(lc, -torch.inf))


def apply(b: _checks.Batch, params: PassAtKParams) -> torch.Tensor:
    """The catalogue's kernel (estimators.py): pass@k advantages shaped like the Batch's
    rewards, on a checked (or trusted) Batch; `params.k` <= every group's size."""
    r = b.rewards
    k = params.k
    success = r >= params.success_threshold
    if b.mask is not None:
        success &= b.mask
    n = b.counts().to(torch.float64)
    c = success.sum(-1).to(torch.float64)
    kk = torch.full_like(n, float(k))
    ratio = torch.exp(_log_comb(n - c, kk) - _log_comb(n, kk))
    rho = 1.0 - ratio
    fail_term = torch.exp(_log_comb(n - c - 1, kk - 1) - _log_comb(n - 1, kk - 1))
    var = rho * (1.0 - rho)
    ok = var > 0
    sigma = torch.where(ok, var, torch.ones_like(var)).sqrt()
    a_pos = torch.where(ok, (1.0 - rho) / sigma, torch.zeros_like(rho))
    a_neg = torch.where(ok, (1.0 - rho - fail_term) / sigma, torch.zeros_like(rho))
    out = torch.where(success, a_pos.unsqueeze(-1), a_neg.unsqueeze(-1)).to(r.dtype)
    return b.unbatch(out if b.mask is None else out.masked_fill(~b.mask, 0.0))


def pass_at_k(
    rewards: torch.Tensor,
    k: int,
    *,
    mask: torch.Tensor | None = None,
    success_threshold: float = 1.0,
) -> torch.Tensor:
    """Pass@k advantages shaped like `rewards` ([G] or [B, G]); see the module docstring.

    Raises InvalidInput (field "k") when k exceeds a group's number of valid items.
    """
    p = kernel_params(PassAtKParams, k=k, success_threshold=success_threshold)
    b = _checks.batch(rewards, mask)
    smallest = int(b.counts().amin())
    if p.k > smallest:
        raise InvalidInput(f"k = {p.k} exceeds a group of {smallest} completions", field="k")
    return apply(b, p)

"""issue 40, item 2: Darling's unanswered completions, counted on the committed groups.

picktwo-main's Darling runs logged every group (completions, base rewards, the rewards Darling
returned). Replaying them through `methods.darling` with the answers the trainer sent
(rewards.given_answer of each completion) reproduces the logged rewards under the old rule
(a missing answer was a class of its own, d = 1) and counts, among groups with both right and
wrong completions, (a) those where a right completion's reweighted reward is below a wrong
one's and (b) those where a right completion's advantage sign (reward minus the group mean:
GRPO's sign) turns negative where GRPO's was positive. Under the new rule (no answer, d = 0)
both counts fall; what remains comes from wrong completions that *did* name an answer nobody
else gave (Darling's novelty, by design) and is stated in EXPERIMENTS.md."""

from __future__ import annotations

from pathlib import Path

import torch

from reweighter.methods import answer_labels, darling
from reweighter_research.decision import group_logs, read_groups
from reweighter_trainer.rewards import given_answer

REPO = Path(__file__).resolve().parents[2]
RUNS = REPO / "experiments" / "picktwo-main" / "runs"
BEFORE = {"mixed": 466, "ranked_below_wrong": 14, "advantage_flipped": 103}
AFTER = {"mixed": 466, "ranked_below_wrong": 12, "advantage_flipped": 86}


def counts(new_rule: bool) -> dict[str, int]:
    out = {"mixed": 0, "ranked_below_wrong": 0, "advantage_flipped": 0}
    for path in group_logs(RUNS, "darling"):
        for g in read_groups(path):
            ok = [a is not None for a in g["answers"]]  # the checker's verdict per completion
            if all(ok) or not any(ok):
                continue
            out["mixed"] += 1
            given = [given_answer(t, g["gold"], "pick_two") for t in g["completions"]]
            r = torch.tensor(g["base_rewards"], dtype=torch.float64)
            labels = torch.tensor(answer_labels(given))
            answered = torch.tensor([a is not None for a in given]) if new_rule else None
            new = darling(r, labels, answered=answered)
            if not new_rule:  # the replay is the logged run
                torch.testing.assert_close(new, torch.tensor(g["rewards"], dtype=torch.float64),
                                           atol=1e-6, rtol=0)
            right = [i for i, x in enumerate(ok) if x]
            wrong = [i for i, x in enumerate(ok) if not x]
            if min(float(new[i]) for i in right) < max(float(new[j]) for j in wrong):
                out["ranked_below_wrong"] += 1
            if any(new[i] < new.mean() and r[i] > r.mean() for i in right):
                out["advantage_flipped"] += 1
    return out


def test_darling_inversions_before_and_after_on_the_committed_groups() -> None:
    before = counts(new_rule=False)
    assert before == BEFORE  # the audit's figures (issue 40), recomputed from the logs
    after = counts(new_rule=True)
    assert after == AFTER
    assert after["ranked_below_wrong"] < before["ranked_below_wrong"]
    assert after["advantage_flipped"] < before["advantage_flipped"]

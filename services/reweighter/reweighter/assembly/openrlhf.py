"""Rounds of the OpenRLHF route: group ids for a caller that sends no step id, where a prompt
comes back. Round state, so it lives in assembly/ beside the other rounds (round.py: one round
of a group on a replica); its one user is the route (api/http/openrlhf.py), which seats each
sample here and submits it to the assembler as a member of the group its seat names.

OpenRLHF posts one sample at a time with its prompt and label, nothing else; the same prompt
returns in later steps. A prompt's samples are therefore numbered into rounds here, and round
r of a prompt is the assembly group `<prefix>:<prompt hash>:<r>`:

- a new sample joins the prompt's open round, unless that round already holds `n` samples or
  any of its members has been answered (complete or timed out): then it opens the next round;
- a sample beyond `n` while the prompt's full round is still being answered (one of its
  members still waits) is *surplus* (`Seat.surplus`): more samples than `n` were sent. It
  opens no round: the route answers it at once with its raw reward, flagged. Were it to open
  the next round, the prompt's next samples would complete that round around it, and the
  numbers would be computed over samples of two steps;
- a sample that arrives just after the full round was answered (within `burst_s`) may be a
  *late* surplus, or the first of the prompt's next step: its round is opened *on probation*.
  The samples of one step arrive together, so when another sample would join that round more
  than `late_s` after it opened, its opener was a late surplus and the joiner is of the next
  step (`Seat.wrong`): it is seated nowhere, and the route answers the round raw;
- any surplus shows that `n` is wrong: `wrong` keeps the reason per `n`, and the route answers
  every later sample of that `n` raw, and the open rounds it would have completed, until the
  URL's `n` changes. No answer is ever computed over samples of two steps;
- the member id is the query's hash, so a re-post of a sample (OpenRLHF retries failed
  requests) is the same member of the same round while its round is open, and within
  `retry_window_s` of its answer. An identical query while the first is still waiting is a
  second member (a repeated completion), not a retry;
- a round answered short (fewer than `n` members) is a size mismatch: `Seat.report` says so
  once per round, with the likely cause.

The bookkeeping is per process and bounded (least recently used prompts are forgotten): behind
several replicas, route by prompt or serve the route from one replica.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Seat:
    """Where one sample sits: its group and member id, and what `leave` needs back."""

    key: str
    group_id: str
    member_id: str
    query_hash: str
    round: int
    surplus: bool = False
    """Beyond `n` while the prompt's full round `round` is being answered: seated nowhere."""
    wrong: bool = False
    """Of the prompt's next step, joining a round a late surplus opened: seated nowhere."""


@dataclass(frozen=True)
class ShortRound:
    """A round answered with fewer members than `n`, or with surplus samples beyond `n`: what
    the caller should be told."""

    round: int
    members: int
    """Members of the short round; for a surplus, how many surplus samples so far."""
    n: int
    after_full_round: bool
    """The round opened within `burst_s` of the prompt's previous round filling with n members,
    or it is a surplus: more samples than n were sent (n too small), rather than fewer (n too
    large, or lost)."""
    surplus: bool = False
    """Samples beyond n arrived while the full round was answered (answered raw, no round)."""

    def message(self) -> str:
        if self.surplus:
            return (
                f"round {self.round} of a prompt got {self.members} sample(s) beyond n={self.n} "
                f"while it was answered: answered with the raw reward, not reweighted (likely "
                f"n_samples_per_prompt = {self.n + self.members}); ?n= in the reward URL must "
                f"equal --rollout.n_samples_per_prompt"
            )
        cause = (
            f"more than n={self.n} samples of this prompt arrived together "
            f"(likely n_samples_per_prompt = {self.n + self.members})"
            if self.after_full_round
            else f"only {self.members} of n={self.n} samples arrived in time "
            f"(n_samples_per_prompt smaller than n, or samples lost)"
        )
        return (
            f"round {self.round} of a prompt was answered with {self.members} of n={self.n} "
            f"members, not reweighted: {cause}; ?n= in the reward URL must equal "
            f"--rollout.n_samples_per_prompt"
        )


@dataclass
class _Prompt:
    round: int = 0
    members: dict[str, float] = field(default_factory=dict)  # open round: member -> last seen
    answered: bool = False  # some member of the open round has its answer
    reported: int = -1  # last round reported short
    previous: dict[str, tuple[int, float]] = field(default_factory=dict)  # member -> (round, t)
    opened_at: float = 0.0  # the open round's first arrival
    full_at: float | None = None  # when the open round reached n members
    previous_full_at: float | None = None  # when the previous round reached n members
    in_flight: dict[str, int] = field(default_factory=dict)  # query hash -> waiting calls
    open_calls: int = 0  # calls seated in the open round still waiting for their answer
    surplus: int = 0  # surplus samples of the open round
    answered_at: float | None = None  # when a member of the open round got its answer
    probation: bool = False  # the open round was opened just after a full round was answered


class Rounds:
    """Seats samples of prompts into rounds of `n`; bounded to `max_prompts` prompts."""

    def __init__(
        self,
        prefix: str,
        *,
        max_prompts: int = 100_000,
        retry_window_s: float = 60.0,
        burst_s: float = 60.0,
        late_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.prefix = prefix
        self.max_prompts = max_prompts
        self.retry_window_s = retry_window_s
        self.burst_s = burst_s
        self.late_s = late_s
        self._clock = clock
        self._prompts: OrderedDict[str, _Prompt] = OrderedDict()
        self.wrong: dict[int, str] = {}
        """n -> why it is wrong (the first surplus seen with it): the route answers raw."""

    @staticmethod
    def _key(prompt: str, n: int) -> str:
        return hashlib.sha256(f"{n}\0{prompt}".encode()).hexdigest()[:24]

    def enter(self, prompt: str, query: str, n: int) -> Seat:
        """The seat of one sample; call `leave(seat, answered=...)` when its call ends."""
        now = self._clock()
        key = self._key(prompt, n)
        qhash = hashlib.sha256(query.encode("utf-8", "surrogatepass")).hexdigest()[:24]
        state = self._prompts.pop(key, None) or _Prompt()
        self._prompts[key] = state  # most recently used last
        while len(self._prompts) > self.max_prompts:
            self._prompts.popitem(last=False)
        copies = state.in_flight.get(qhash, 0)
        member = qhash if copies == 0 else f"{qhash}.{copies}"
        before = state.previous.get(member)
        if member in state.members and not state.answered:  # a re-post, its round still open
            seat_round = state.round
        elif before is not None and now - before[1] <= self.retry_window_s:
            seat_round = before[0]  # a re-post of an answered member: the store has its answer
        elif len(state.members) >= n and state.open_calls > 0:
            state.surplus += 1  # its round is full and still being answered: seated nowhere
            self.wrong.setdefault(
                n,
                f"a sample of a prompt beyond n={n} arrived while its round of {n} was "
                "answered (n_samples_per_prompt is larger than n)",
            )
            return Seat(key, "", member, qhash, state.round, surplus=True)
        else:
            if state.answered or len(state.members) >= n:
                self._close(state, n, now)
            seat_round = state.round
            if state.probation and state.members and now - state.opened_at > self.late_s:
                self.wrong.setdefault(
                    n,
                    f"a sample of a prompt arrived after its round of n={n} was answered and "
                    f"no sibling followed within {self.late_s:g} s: a surplus of that step "
                    "(n_samples_per_prompt is larger than n)",
                )
                return Seat(key, "", member, qhash, state.round, wrong=True)
        if seat_round == state.round:
            if not state.members:
                state.opened_at = now
            state.members[member] = now
            state.open_calls += 1
            if state.full_at is None and len(state.members) >= n:
                state.full_at = now
        state.in_flight[qhash] = copies + 1
        return Seat(key, f"{self.prefix}:{key}:{seat_round}", member, qhash, seat_round)

    def whole(self, seat: Seat, n: int) -> bool:
        """Whether the seat's round holds its n members (or was closed): its answer is of one
        step, and stands when `n` is shown wrong meanwhile."""
        state = self._prompts.get(seat.key)
        return state is None or seat.round != state.round or len(state.members) >= n

    def _close(self, state: _Prompt, n: int, now: float) -> None:
        state.previous = {
            m: v for m, v in state.previous.items() if now - v[1] <= self.retry_window_s
        }
        state.previous.update({m: (state.round, now) for m in state.members})
        state.previous_full_at = state.full_at
        state.probation = (
            state.full_at is not None
            and state.answered_at is not None
            and now - state.answered_at <= self.burst_s
        )
        state.round += 1
        state.members = {}
        state.answered = False
        state.full_at = None
        state.open_calls = 0
        state.surplus = 0
        state.answered_at = None

    def leave(self, seat: Seat, *, answered: bool, members: int, n: int) -> ShortRound | None:
        """The sample's call ended. `answered`: it got an answer computed over `members`
        members (an error is not an answer). Returns the round's size mismatch the first time
        one of its members is answered short, or the first time it has a surplus sample;
        None otherwise."""
        state = self._prompts.get(seat.key)
        if state is None or seat.wrong:
            return None
        if seat.surplus:
            if seat.round != state.round or state.reported >= seat.round:
                return None
            state.reported = seat.round
            return ShortRound(seat.round, state.surplus, n, after_full_round=True, surplus=True)
        left = state.in_flight.get(seat.query_hash, 0) - 1
        if left > 0:
            state.in_flight[seat.query_hash] = left
        else:
            state.in_flight.pop(seat.query_hash, None)
        if seat.round == state.round:
            state.open_calls = max(0, state.open_calls - 1)
        if not answered:
            return None
        if seat.round == state.round:
            state.answered = True
            state.answered_at = self._clock()
            state.previous.update({m: (state.round, self._clock()) for m in state.members})
        if members >= n or state.reported >= seat.round:
            return None
        state.reported = seat.round
        before = state.previous_full_at
        after_full = (
            seat.round == state.round
            and before is not None
            and state.opened_at - before <= self.burst_s
        )
        return ShortRound(seat.round, members, n, after_full)

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
  once per round, with the likely cause;
- a round's fate (computed or raw) is decided once, in its prompt's state, before any member is
  answered: the first member answered from its numbers makes it COMPUTED; `n` shown wrong while
  the round is not yet whole makes it RAW, and then every member is answered raw, even one whose
  numbers arrive later (the round filled on another replica that had not yet seen `n` wrong).
  So no round is answered part reweighted, part raw, on one replica or many.

- every round is numbered as it opens among its job's rounds (`Seat.ordinal`, from 0): the
  route's step for the live page is that number divided by the prompts per step (`?batch=`).

One state machine, two stores (as group assembly: store.py / redis_store.py). A prompt's state
is one `PromptState`; the transitions (`enter`, `release`, `leave` of `Rules`) are written once,
in Python, and read and change it in place. A store only holds the states and applies a
transition atomically: `MemoryRounds` in this process (operations never await; bounded, least
recently used prompts forgotten), `RedisRounds` shared by every replica (the state read, the
transition run here, and written back by a compare-and-set script that fails when another
replica wrote meanwhile, then read and run again; the round's number is taken in the same
script). So any replica serves any sample of a prompt. tests/integrations/test_openrlhf.py runs
the rules on both stores, and two `reweighter serve` replicas on one Redis.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any, TypeVar

from ..errors import StoreUnavailable
from ..tenancy import DEFAULT_TENANT, scoped

T = TypeVar("T")
NEW = -1
"""`PromptState.ordinal` of a round just opened: its store numbers it when the state is written."""


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
    ordinal: int | None = None
    """The round's number among its job's rounds, in the order they opened (None: seated
    nowhere, or a re-post of a round numbered before stores kept it)."""


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
class PromptState:
    """One prompt's rounds (of one `n`, in one job), as both stores keep it. Times are on the
    store's clock. `ordinal` comes first in `dump` (RedisRounds' script numbers a NEW round
    by rewriting that prefix)."""

    ordinal: int | None = None  # the open round's number among the job's rounds (NEW: to number)
    round: int = 0
    members: dict[str, float] = field(default_factory=dict)  # open round: member -> last seen
    answered: bool = False  # some member of the open round has its answer
    reported: int = -1  # last round reported short
    previous: dict[str, list[Any]] = field(default_factory=dict)  # member -> [round, t, ordinal]
    opened_at: float = 0.0  # the open round's first arrival
    full_at: float | None = None  # when the open round reached n members
    previous_full_at: float | None = None  # when the previous round reached n members
    in_flight: dict[str, int] = field(default_factory=dict)  # query hash -> waiting calls
    open_calls: int = 0  # calls seated in the open round still waiting for their answer
    surplus: int = 0  # surplus samples of the open round
    answered_at: float | None = None  # when a member of the open round got its answer
    probation: bool = False  # the open round was opened just after a full round was answered
    fates: dict[str, str] = field(default_factory=dict)  # round -> COMPUTED or RAW (recent ones)

    def dump(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def load(cls, text: str | bytes) -> PromptState:
        return cls(**json.loads(text))


COMPUTED = "computed"
"""A round's fate: a member was answered with the round's computed numbers; every member is."""
RAW = "raw"
"""A round's fate: a member was answered raw (n shown wrong before the round was whole); every
member is, even one whose computed answer arrives later."""
KEPT_FATES = 4
"""Rounds before the open one whose fate a prompt keeps (a member of a closed round may still be
answered: its round closed when the next one opened)."""


@dataclass(frozen=True)
class Left:
    """What `Rules.leave` decided: the round's size mismatch to report (first time only), and
    whether the member's computed answer stands (False: its round's fate is RAW, answer it
    raw)."""

    short: ShortRound | None = None
    stands: bool = True


@dataclass(frozen=True)
class Entered:
    """What `Rules.enter` decided: the seat, and why `n` is wrong when it showed it."""

    seat: Seat
    wrong: str | None = None


@dataclass(frozen=True)
class Rules:
    """The transitions of a prompt's state, written once for both stores. `stale_s`: a call
    seated in a full round is taken for gone (its replica died before `leave`) this long after
    the round filled, so it cannot make the next step's samples look surplus."""

    retry_window_s: float = 60.0
    burst_s: float = 60.0
    late_s: float = 5.0
    stale_s: float = 240.0

    def enter(self, state: PromptState, key: str, query: str, n: int, now: float) -> Entered:
        qhash = hashlib.sha256(query.encode("utf-8", "surrogatepass")).hexdigest()[:24]
        copies = state.in_flight.get(qhash, 0)
        member = qhash if copies == 0 else f"{qhash}.{copies}"
        before = state.previous.get(member)
        ordinal = state.ordinal
        if member in state.members and not state.answered:  # a re-post, its round still open
            seat_round = state.round
        elif before is not None and now - before[1] <= self.retry_window_s:
            seat_round, ordinal = before[0], before[2]  # a re-post of an answered member
        elif (
            len(state.members) >= n
            and state.open_calls > 0
            and (state.full_at is None or now - state.full_at <= self.stale_s)
        ):
            state.surplus += 1  # its round is full and still being answered: seated nowhere
            why = (
                f"a sample of a prompt beyond n={n} arrived while its round of {n} was "
                "answered (n_samples_per_prompt is larger than n)"
            )
            return Entered(Seat(key, "", member, qhash, state.round, surplus=True), why)
        else:
            if state.answered or len(state.members) >= n:
                self._close(state, now)
            seat_round = state.round
            if state.probation and state.members and now - state.opened_at > self.late_s:
                why = (
                    f"a sample of a prompt arrived after its round of n={n} was answered and "
                    f"no sibling followed within {self.late_s:g} s: a surplus of that step "
                    "(n_samples_per_prompt is larger than n)"
                )
                return Entered(Seat(key, "", member, qhash, state.round, wrong=True), why)
        if seat_round == state.round:
            if not state.members:
                state.opened_at = now
                state.ordinal = NEW
            state.members[member] = now
            state.open_calls += 1
            if state.full_at is None and len(state.members) >= n:
                state.full_at = now
            ordinal = state.ordinal
        state.in_flight[qhash] = copies + 1
        return Entered(Seat(key, "", member, qhash, seat_round, ordinal=ordinal))

    def release(self, state: PromptState, seat: Seat, n: int) -> bool:
        """`n` was shown wrong while the seat waits for its round's answer: whether to answer it
        raw now. Decided once per round, for all its members on every replica: a round whose
        fate is set keeps it; a round holding its n members (or closed) is of one step, so it
        waits for its answer (fate left to the answer); any other round's fate becomes RAW, so
        a member answered from its numbers later (the round filled after all) is answered raw
        too. Were each member to decide alone, one round could be answered part raw, part
        reweighted."""
        fate = state.fates.get(str(seat.round))
        if fate is not None:
            return fate == RAW
        if seat.round != state.round or len(state.members) >= n:
            return False
        state.fates[str(seat.round)] = RAW
        return True

    def _close(self, state: PromptState, now: float) -> None:
        state.previous = {
            m: v for m, v in state.previous.items() if now - v[1] <= self.retry_window_s
        }
        state.previous.update({m: [state.round, now, state.ordinal] for m in state.members})
        state.previous_full_at = state.full_at
        state.probation = (
            state.full_at is not None
            and state.answered_at is not None
            and now - state.answered_at <= self.burst_s
        )
        state.round += 1
        state.fates = {r: f for r, f in state.fates.items() if int(r) >= state.round - KEPT_FATES}
        state.members = {}
        state.answered = False
        state.full_at = None
        state.open_calls = 0
        state.surplus = 0
        state.answered_at = None

    def leave(
        self, state: PromptState, seat: Seat, answered: bool, members: int, n: int, now: float
    ) -> Left:
        """The seat's call ended; `answered`: with an answer over `members` members (n or more:
        its round's computed numbers, which set the round's fate to COMPUTED unless it is RAW
        already: then `stands` is False)."""
        if seat.wrong:
            return Left()
        if seat.surplus:
            if seat.round != state.round or state.reported >= seat.round:
                return Left()
            state.reported = seat.round
            surplus = ShortRound(seat.round, state.surplus, n, after_full_round=True, surplus=True)
            return Left(surplus)
        left = state.in_flight.get(seat.query_hash, 0) - 1
        if left > 0:
            state.in_flight[seat.query_hash] = left
        else:
            state.in_flight.pop(seat.query_hash, None)
        if seat.round == state.round:
            state.open_calls = max(0, state.open_calls - 1)
        if not answered:
            return Left()
        if seat.round == state.round:
            state.answered = True
            state.answered_at = now
            state.previous.update({m: [state.round, now, state.ordinal] for m in state.members})
        if members >= n:
            fate = state.fates.setdefault(str(seat.round), COMPUTED)
            return Left(stands=fate == COMPUTED)
        if state.reported >= seat.round:
            return Left()
        state.reported = seat.round
        before = state.previous_full_at
        after_full = (
            seat.round == state.round
            and before is not None
            and state.opened_at - before <= self.burst_s
        )
        return Left(ShortRound(seat.round, members, n, after_full))


Transition = Callable[[PromptState, float], T]


class RoundsStore:
    """Where prompts' states live; `update` applies a transition atomically. `remote`: another
    replica may change the state (a waiter polls for what it cannot be told)."""

    remote: bool = False

    async def update(
        self, job: str, key: str, fn: Transition[T], create: bool = True
    ) -> tuple[T | None, PromptState | None]:
        """Run `fn(state, now)` on the prompt's state (a new one when it has none and `create`;
        else nothing is run and (None, None) returned), atomically, store the result, number a
        round `fn` opened (ordinal NEW), and return fn's result and the state as stored."""
        raise NotImplementedError

    async def read(self, job: str, key: str) -> PromptState | None:
        raise NotImplementedError

    async def wrong(self, job: str, n: int) -> str | None:
        """Why `n` was shown wrong in this job, or None."""
        raise NotImplementedError

    async def set_wrong(self, job: str, n: int, why: str) -> None:
        """Record why `n` is wrong, unless a reason is recorded already."""
        raise NotImplementedError


class MemoryRounds(RoundsStore):
    """One process's prompts, bounded to `max_prompts` (least recently used forgotten)."""

    def __init__(
        self, max_prompts: int = 100_000, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.max_prompts = max_prompts
        self._clock = clock
        self._prompts: OrderedDict[tuple[str, str], PromptState] = OrderedDict()
        self._opened: dict[str, int] = {}
        self._wrong: dict[tuple[str, int], str] = {}

    async def update(
        self, job: str, key: str, fn: Transition[T], create: bool = True
    ) -> tuple[T | None, PromptState | None]:
        state = self._prompts.pop((job, key), None)
        if state is None:
            if not create:
                return None, None
            state = PromptState()
        self._prompts[(job, key)] = state  # most recently used last
        while len(self._prompts) > self.max_prompts:
            self._prompts.popitem(last=False)
        result = fn(state, self._clock())
        if state.ordinal == NEW:
            state.ordinal = self._opened.get(job, 0)
            self._opened[job] = state.ordinal + 1
        return result, state

    async def read(self, job: str, key: str) -> PromptState | None:
        return self._prompts.get((job, key))

    async def wrong(self, job: str, n: int) -> str | None:
        return self._wrong.get((job, n))

    async def set_wrong(self, job: str, n: int, why: str) -> None:
        self._wrong.setdefault((job, n), why)


_NEW_PREFIX = f'{{"ordinal":{NEW},'

# KEYS: the prompt's state, the job's round counter. ARGV: the state as read ('' for none),
# the new state, its ttl in ms, the new-round prefix. Answers -2 when the state changed since
# it was read (read and run the transition again), the round's number when the new state
# opened one (numbered here, atomically with the write), else -1.
_CAS = """
if (redis.call('GET', KEYS[1]) or '') ~= ARGV[1] then return -2 end
local new = ARGV[2]
local n = -1
local p = ARGV[4]
if string.sub(new, 1, #p) == p then
  n = redis.call('INCR', KEYS[2]) - 1
  new = '{"ordinal":' .. n .. ',' .. string.sub(new, #p + 1)
end
redis.call('SET', KEYS[1], new, 'PX', ARGV[3])
return n
"""


class RedisRounds(RoundsStore):
    """Prompts' states shared by every replica on one Redis, under `prefix`:
      p:{job}:{key}   a prompt's PromptState (JSON), expiring `ttl_s` after its last change
      opened:{job}    the job's rounds opened so far (their numbers)
      wrong:{job}     hash n -> why that n was shown wrong (expires `ttl_s` after it is set)
    Time is the Redis server's (`TIME`), the one clock of every replica; `clock` replaces it in
    tests that move time."""

    remote = True

    def __init__(
        self,
        client: Any,
        prefix: str,
        *,
        ttl_s: float = 6 * 3600.0,
        clock: Callable[[], float] | None = None,
        attempts: int = 200,
    ) -> None:
        self._redis = client
        self.prefix = prefix
        self.ttl_ms = max(1, int(ttl_s * 1000))
        self._clock = clock
        self.attempts = attempts
        self._cas = client.register_script(_CAS)

    def _key(self, job: str, key: str) -> str:
        return f"{self.prefix}p:{scoped(key, job)}"

    async def _call(self, awaitable: Any) -> Any:
        try:
            return await awaitable
        except Exception as e:  # redis ConnectionError, TimeoutError, ResponseError ...
            raise StoreUnavailable(f"OpenRLHF rounds' store (Redis) failed: {e}") from e

    async def _read(self, k: str) -> tuple[str | None, float]:
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.get(k)
            pipe.time()
            text, (sec, usec) = await self._call(pipe.execute())
        now = self._clock() if self._clock is not None else sec + usec / 1e6
        if isinstance(text, bytes):
            text = text.decode()
        return text, now

    async def update(
        self, job: str, key: str, fn: Transition[T], create: bool = True
    ) -> tuple[T | None, PromptState | None]:
        k = self._key(job, key)
        counter = f"{self.prefix}opened:{job}"
        for attempt in range(self.attempts):
            text, now = await self._read(k)
            if not text and not create:
                return None, None
            state = PromptState.load(text) if text else PromptState()
            result = fn(state, now)
            args = [text or "", state.dump(), self.ttl_ms, _NEW_PREFIX]
            n = int(await self._call(self._cas(keys=[k, counter], args=args)))
            if n == -2:  # another replica changed it: read it again
                await asyncio.sleep(random.random() * 0.002 * min(attempt, 10))
                continue
            if n >= 0:
                state.ordinal = n
            return result, state
        raise RuntimeError(f"OpenRLHF rounds: prompt state kept changing ({self.attempts} tries)")

    async def read(self, job: str, key: str) -> PromptState | None:
        text, _ = await self._read(self._key(job, key))
        return PromptState.load(text) if text else None

    async def wrong(self, job: str, n: int) -> str | None:
        why = await self._call(self._redis.hget(f"{self.prefix}wrong:{job}", str(n)))
        return why.decode() if isinstance(why, bytes) else why

    async def set_wrong(self, job: str, n: int, why: str) -> None:
        k = f"{self.prefix}wrong:{job}"
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hsetnx(k, str(n), why)
            pipe.pexpire(k, self.ttl_ms)
            await self._call(pipe.execute())


def rounds_store(assembly_store: Any) -> RoundsStore:
    """The rounds' store beside group assembly's: on its Redis (shared by the replicas) when
    assembly is on Redis, else in this process."""
    from .redis_store import RedisStore

    if isinstance(assembly_store, RedisStore):
        return RedisRounds(assembly_store._redis, f"{assembly_store.prefix}openrlhf:")
    return MemoryRounds()


class Rounds:
    """One job's prompts' rounds of `n` on a store (default: this process's)."""

    def __init__(
        self,
        prefix: str,
        store: RoundsStore | None = None,
        *,
        job: str = DEFAULT_TENANT,
        max_prompts: int = 100_000,
        retry_window_s: float = 60.0,
        burst_s: float = 60.0,
        late_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.prefix = prefix
        self.job = job
        self.store = store if store is not None else MemoryRounds(max_prompts, clock)
        self.rules = Rules(retry_window_s, burst_s, late_s, stale_s=burst_s + 90.0)

    @staticmethod
    def _key(prompt: str, n: int) -> str:
        return hashlib.sha256(f"{n}\0{prompt}".encode("utf-8", "surrogatepass")).hexdigest()[:24]

    async def enter(self, prompt: str, query: str, n: int) -> Seat:
        """The seat of one sample; call `leave(seat, answered=...)` when its call ends. A seat
        that shows `n` wrong records why (`wrong(n)`)."""
        key = self._key(prompt, n)
        entered, state = await self.store.update(
            self.job, key, lambda s, now: self.rules.enter(s, key, query, n, now)
        )
        assert entered is not None and state is not None
        seat = entered.seat
        if entered.wrong is not None:
            await self.store.set_wrong(self.job, n, entered.wrong)
            return seat
        ordinal = state.ordinal if seat.round == state.round else seat.ordinal
        return replace(seat, group_id=f"{self.prefix}:{key}:{seat.round}", ordinal=ordinal)

    async def release(self, seat: Seat, n: int) -> bool:
        """`n` was shown wrong while the seat waits: whether to answer it raw now (`Rules.release`:
        decided once for its whole round, on the store)."""
        raw, _ = await self.store.update(
            self.job, seat.key, lambda s, now: self.rules.release(s, seat, n), create=False
        )
        return bool(raw)

    async def leave(self, seat: Seat, *, answered: bool, members: int, n: int) -> Left:
        """The sample's call ended. `answered`: it got an answer computed over `members`
        members (an error is not an answer). `short`: the round's size mismatch the first
        time one of its members is answered short, or the first time it has a surplus sample.
        `stands`: False when the answer is its round's numbers but the round's fate is RAW
        (answer it raw, as its siblings were)."""
        if seat.wrong:
            return Left()
        left, _ = await self.store.update(
            self.job,
            seat.key,
            lambda s, now: self.rules.leave(s, seat, answered, members, n, now),
            create=False,
        )
        return left if left is not None else Left()

    async def wrong(self, n: int) -> str | None:
        """Why `n` was shown wrong in this job (a surplus), or None."""
        return await self.store.wrong(self.job, n)

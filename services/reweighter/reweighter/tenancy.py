"""Tenants: one service shared by many training jobs (none can starve another, and everything a
job can name is its own).

A tenant is a training job (or a team): a name, a key its requests carry as today's API key,
a weight (its share of the encoder when several tenants have work) and a bound on the requests
it may have queued. The tenants file (`--tenants PATH` / `REWEIGHTER_TENANTS`, JSON or YAML):

    {"tenants": [{"name": "team-a", "key": "...", "weight": 2, "max_queued": 256},
                 {"name": "team-b", "key_sha256": "<hex sha256 of the key>"}]}

Without a file, `REWEIGHTER_API_KEY` is the one-tenant shorthand (its tenant is "default"), and
with neither the service is open (every caller is "default"), as before tenants existed.

Why a ContextVar: the transports resolve the caller's tenant before any route or RPC runs and
set it here; the engine (memory keys), the assembler (group keys) and the batcher (fair shares,
bounds) read it where they need it, with no parameter threaded through every layer (the same
pattern as reweighter.timings). `current_tenant()` outside a request is "default".

Why the "default" tenant's keys are unscoped (`scoped`): a single-key or open service keeps the
store keys it always had (nothing changes for it, and Redis state survives an upgrade); every
other tenant's keys carry its name.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import logging
import re
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import Unauthenticated

log = logging.getLogger(__name__)

DEFAULT_TENANT = "default"
"""The tenant of every request when no tenants file is configured."""

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class Tenant:
    """One tenant as the service uses it (never its key: only the key's digest is kept)."""

    name: str = DEFAULT_TENANT
    weight: float = 1.0
    max_queued: int | None = None
    """Requests it may have waiting or running in the embedding queue; None: the global bound."""
    key_sha256: str | None = field(default=None, repr=False)
    openrlhf_token_sha256: str | None = field(default=None, repr=False)
    share: float = 1.0
    """Its weight over all the file's weights: its part of the assembly bounds."""


DEFAULT = Tenant()

_current: ContextVar[Tenant] = ContextVar("reweighter_tenant", default=DEFAULT)


def current() -> Tenant:
    """The tenant of the request being served in this context ("default" outside one)."""
    return _current.get()


def current_tenant() -> str:
    """The caller's tenant name: what a route reads (the seam of /work/signals/38-seam.md)."""
    return _current.get().name


def tenant_name(request: Any) -> str:
    """The tenant of an HTTP request (a starlette Request or an ASGI scope)."""
    scope = getattr(request, "scope", request)
    tenant = scope.get("reweighter.tenant") if isinstance(scope, Mapping) else None
    return tenant.name if isinstance(tenant, Tenant) else current_tenant()


def enter(tenant: Tenant) -> Token[Tenant]:
    """Make `tenant` the current one (for this context and what it spawns)."""
    return _current.set(tenant)


@contextmanager
def acting_as(tenant: Tenant | str) -> Iterator[Tenant]:
    """The block runs as `tenant` (tests, background work done on a tenant's behalf)."""
    t = tenant if isinstance(tenant, Tenant) else Tenant(name=tenant)
    token = _current.set(t)
    try:
        yield t
    finally:
        _current.reset(token)


def scoped(key: str, tenant: str | None = None) -> str:
    """`key` in the namespace of `tenant` (default: the current one). The default tenant's keys
    are the bare keys (a single-key or open service keeps its keys); others' carry the name."""
    name = current_tenant() if tenant is None else tenant
    return key if name == DEFAULT_TENANT else f"{name}:{key}"


def unscoped(key: str, tenant: str) -> str:
    """The key a tenant named, from its scoped form."""
    prefix = f"{tenant}:"
    if tenant != DEFAULT_TENANT and key.startswith(prefix):
        return key[len(prefix) :]
    return key


def tenant_share(bound: int, tenant: Tenant | None = None) -> int | None:
    """`tenant`'s part (default: the caller's) of a service-wide `bound` (group assembly's open
    groups and held members), by weight; None for the only tenant (the bound is all its own)."""
    t = current() if tenant is None else tenant
    if t.share >= 1.0:
        return None
    return max(1, int(bound * t.share))


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


class TenantsFileError(ValueError):
    """The tenants file does not parse or breaks a rule; the message names the field."""


@dataclass(frozen=True)
class TenantTable:
    """Who may call, and as whom. `open`: no key is needed (every caller is "default")."""

    tenants: tuple[Tenant, ...] = ()
    open: bool = True
    source: str | None = None

    @property
    def configured(self) -> bool:
        """Whether a tenants file is in use (names other than "default" exist)."""
        return self.source is not None

    @property
    def names(self) -> list[str]:
        return [t.name for t in self.tenants] if self.tenants else [DEFAULT_TENANT]

    def by_name(self, name: str) -> Tenant | None:
        return next((t for t in self.tenants if t.name == name), None)

    def resolve_bearer(self, header: str | None) -> Tenant:
        """The tenant of an `authorization` value ("Bearer <key>"); Unauthenticated if none."""
        if self.open:
            return DEFAULT
        if not header:
            raise Unauthenticated("missing API key: send 'authorization: Bearer <key>'")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer":
            raise Unauthenticated("wrong API key")
        return self._match(token.strip(), "key_sha256", "wrong API key")

    def resolve_token(self, token: str) -> Tenant | None:
        """The tenant whose OpenRLHF URL token this is, or None."""
        try:
            return self._match(token, "openrlhf_token_sha256", "")
        except Unauthenticated:
            return None

    def _match(self, secret: str, attr: str, message: str) -> Tenant:
        # Every digest is compared (constant time each), so timing does not tell which matched.
        d = digest(secret).encode()
        found = None
        for t in self.tenants:
            have = getattr(t, attr)
            if have is not None and hmac.compare_digest(d, have.encode()):
                found = t
        if found is None:
            raise Unauthenticated(message)
        return found


def single_key(api_key: str | None) -> TenantTable:
    """The table of a service without a tenants file: open, or one key for "default"."""
    if not api_key:
        return TenantTable()
    return TenantTable((Tenant(key_sha256=digest(api_key)),), open=False)


def parse_tenants(text: str, source: str = "<tenants>") -> TenantTable:
    """A table from the text of a tenants file (JSON, or YAML); TenantsFileError names the
    field at fault."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as json_error:
        try:
            import yaml

            data = yaml.safe_load(text)
        except Exception as exc:
            why = f"neither JSON ({json_error}) nor YAML ({exc})"
            raise TenantsFileError(f"{source}: {why}") from exc
    if not isinstance(data, Mapping) or not isinstance(data.get("tenants"), list):
        raise TenantsFileError(f"{source}: tenants: expected a mapping with a 'tenants' list")
    out: list[Tenant] = []
    secrets: set[str] = set()
    for i, entry in enumerate(data["tenants"]):
        out.append(_tenant(entry, f"tenants[{i}]", secrets, source))
    names = [t.name for t in out]
    for n in names:
        if names.count(n) > 1:
            raise TenantsFileError(f"{source}: tenants: the name {n!r} appears twice")
    if not out:
        raise TenantsFileError(f"{source}: tenants: the list is empty (no caller could get in)")
    total = sum(t.weight for t in out)
    out = [dataclasses.replace(t, share=t.weight / total) for t in out]
    return TenantTable(tuple(out), open=False, source=source)


_FIELDS = {"name", "key", "key_sha256", "weight", "max_queued", "openrlhf_token",
           "openrlhf_token_sha256"}  # fmt: skip


def _tenant(entry: Any, where: str, secrets: set[str], source: str) -> Tenant:
    def bad(name: str, why: str) -> TenantsFileError:
        return TenantsFileError(f"{source}: {where}.{name}: {why}")

    if not isinstance(entry, Mapping):
        raise TenantsFileError(f"{source}: {where}: expected a mapping")
    for k in entry:
        if k not in _FIELDS:
            raise bad(str(k), f"unknown field (known: {', '.join(sorted(_FIELDS))})")
    name = entry.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise bad("name", "1-63 characters of letters, digits, '_', '.', '-' (not first)")
    key = _secret(entry, "key", bad)
    if key is None:
        raise bad("key", "each tenant needs 'key' or 'key_sha256'")
    if key in secrets:
        raise bad("key", "another tenant has the same key")
    secrets.add(key)
    token = _secret(entry, "openrlhf_token", bad)
    if token is not None and token in secrets:
        raise bad("openrlhf_token", "must differ from every key and token")
    if token is not None:
        secrets.add(token)
    weight = entry.get("weight", 1)
    if isinstance(weight, bool) or not isinstance(weight, int | float) or not weight > 0:
        raise bad("weight", f"a number above 0, not {weight!r}")
    if weight > 1e6:
        raise bad("weight", "at most 1e6")
    max_queued = entry.get("max_queued")
    if max_queued is not None and (
        isinstance(max_queued, bool) or not isinstance(max_queued, int) or max_queued < 1
    ):
        raise bad("max_queued", f"an integer of at least 1, not {max_queued!r}")
    return Tenant(name, float(weight), max_queued, key, token)


def _secret(entry: Mapping[str, Any], name: str, bad: Any) -> str | None:
    """The digest of `name` or `name_sha256` (exactly one may be given)."""
    plain, hashed = entry.get(name), entry.get(f"{name}_sha256")
    if plain is not None and hashed is not None:
        raise bad(name, f"give '{name}' or '{name}_sha256', not both")
    if plain is not None:
        if not isinstance(plain, str) or len(plain) < 8:
            raise bad(name, "a string of at least 8 characters")
        return digest(plain)
    if hashed is not None:
        if not isinstance(hashed, str) or not _HEX64.match(hashed.lower()):
            raise bad(f"{name}_sha256", "64 hexadecimal digits (sha256 of the secret)")
        return hashed.lower()
    return None


def load_tenants(path: str | Path) -> TenantTable:
    """A table from the tenants file at `path`."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise TenantsFileError(f"{p}: cannot read: {exc.strerror or exc}") from exc
    return parse_tenants(text, str(p))


class Tenants:
    """The service's current table, swapped whole on reload (SIGHUP): a request resolved its
    tenant when it arrived, so requests in flight finish as they began."""

    def __init__(self, table: TenantTable, path: str | None = None) -> None:
        self.table = table
        self.path = path
        self.reloads = 0
        self.reload_errors = 0
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Any) -> Tenants:
        """The tenants file when one is set (a bad file stops the start, naming the field),
        else REWEIGHTER_API_KEY's one tenant, else open."""
        path = getattr(settings, "tenants", None)
        if path:
            return cls(load_tenants(path), str(path))
        return cls(single_key(getattr(settings, "api_key", None)))

    def reload(self) -> bool:
        """Read the file again; a file that does not load is refused (the reason logged) and
        the old tenants kept. True when the new table is in use."""
        if self.path is None:
            log.info("SIGHUP: no tenants file configured; nothing to reload")
            return False
        with self._lock:
            try:
                table = load_tenants(self.path)
            except TenantsFileError as exc:
                self.reload_errors += 1
                log.error("tenants file refused, keeping the %d tenants in use: %s",
                          len(self.table.tenants), exc)  # fmt: skip
                return False
            self.table = table
            self.reloads += 1
        log.info("tenants reloaded from %s: %s", self.path, ", ".join(table.names))
        return True


# -- deadlines --------------------------------------------------------------------------------

DEADLINE_HEADER = "x-request-timeout"
"""HTTP header: seconds the caller will wait (a float). Past it the request is dropped before
it is computed (504 DeadlineExceeded); gRPC uses the call's own deadline."""


@dataclass(frozen=True)
class Deadline:
    """When a request stops being worth computing: a time on `time.monotonic()`'s clock, and/or
    a probe telling whether its client has gone."""

    at: float | None = None
    gone: Any = None  # Callable[[], bool] | None

    def passed(self, now: float) -> str | None:
        """Why the request is no longer wanted (None: it still is)."""
        if self.at is not None and now >= self.at:
            return "its deadline passed before it was computed"
        if self.gone is not None:
            try:
                if self.gone():
                    return "its client went away before it was computed"
            except Exception:  # a probe must never fail the worker
                return None
        return None


_deadline: ContextVar[Deadline | None] = ContextVar("reweighter_deadline", default=None)


def current_deadline() -> Deadline | None:
    return _deadline.get()


def set_deadline(deadline: Deadline | None) -> Token[Deadline | None]:
    return _deadline.set(deadline)

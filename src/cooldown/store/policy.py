"""The store: its rooms composed over one state. Its public methods take a caller's
keywords, build one `CallScope` and hand it to the room that answers."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import NoReturn

from ..arguments import require_str
from ..digests import PreparedHmac, credential_message, credential_prefix
from ..evidence.outcome import UpstreamOutcome
from .admission import ORDERS, Attempt, Order
from .attempts import Attempts
from .backend import SharedObservations, Sharing
from .budget import SCOPES_PER_CREDENTIAL
from .inspection import Inspection
from .operators import KeyActions
from .parts import MAX_ENTRIES, StoreState
from .recording import Cooling, Recording
from .refills import RefillReadings
from .scope import CallScope, call_scope
from .selection import Reason, Selection
from .verdict import Verdict
from .waiting import SHARED_RECHECK_SECONDS

__all__ = [
    "MAX_ENTRIES",
    "ORDERS",
    "SCOPES_PER_CREDENTIAL",
    "Attempt",
    "ModelCooldown",
    "Order",
    "model_cooldown",
]


class ModelCooldown:
    """Cooldown deadlines per (credential, model or bucket), bounded and safe to share.

    Keys, models and bucket names are reduced to HMAC digests under a salt that never
    leaves the process, so the table can be inspected, logged or dumped safely. Pass
    `secret` (32 bytes or more) only where two stores must agree on ids, as in tests.
    `scopes_per_credential` (1 to 64) exists for tests of the scope budget.

    Its parts: `operators` (an operator's label, drain and clear of one key), `refills`
    (how each provider's limits refill, as learned), `inspection` (the read-only
    questions of a status page) and `waiters` (the dispatches waiting for a key).
    """

    def __init__(
        self,
        *,
        max_entries: int = MAX_ENTRIES,
        secret: bytes | None = None,
        scopes_per_credential: int = SCOPES_PER_CREDENTIAL,
    ) -> None:
        for value, name in ((max_entries, "max_entries"), (scopes_per_credential, "scopes")):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be an int")
        if secret is not None and not isinstance(secret, bytes):
            raise TypeError("secret must be bytes")
        if secret is not None and len(secret) < 32:
            raise ValueError("secret must be at least 32 bytes")
        self._state = StoreState(max_entries, secret, scopes_per_credential)
        self._selection = Selection(self._state)
        self._recording = Recording(self._state)
        self.operators = KeyActions(self._state)
        self.refills = RefillReadings(self._state)
        self.inspection = Inspection(self._state)
        self.waiters = self._state.waiters
        self._attempts = Attempts(
            self._state, self._selection, self._recording, self.operators, self.refills
        )

    def __repr__(self) -> str:
        return f"<ModelCooldown entries={self.entry_count} capacity={self.capacity}>"

    def __reduce_ex__(self, protocol: object) -> NoReturn:
        raise TypeError("ModelCooldown holds a process-local secret and cannot be pickled")

    def __copy__(self) -> NoReturn:
        raise TypeError("ModelCooldown cannot be copied; share the one instance instead")

    def __deepcopy__(self, memo: object) -> NoReturn:
        raise TypeError("ModelCooldown cannot be copied; share the one instance instead")

    def credential_id(self, provider: str, credential: str) -> str:
        """The stable, non-reversible id this store uses for a credential, as 64 hex chars."""
        message = credential_message(
            credential_prefix(provider), require_str(credential, "credential")
        )
        return self._state.digest(message).hex()

    def record(
        self,
        provider: str,
        credential: str,
        outcome: UpstreamOutcome,
        *,
        model: str | None = None,
        quota_bucket: str | None = None,
        credential_wide_auth: bool = False,
        retry_after_seconds: float | None = None,
        fallback_seconds: float = 60,
        max_seconds: int = 3600,
        now: float | None = None,
        sent_at: float | None = None,
        foreign: bool = False,
    ) -> float | None:
        """Store what one attempt proved about a credential; return the entry's deadline.

        A success clears a scope's cooldown only when its attempt started (`sent_at`,
        default: now) after that cooldown was recorded: a stale 200 never reopens a key.
        A spent quota (`QUOTA_SPENT`, credential-wide) is marked as such for operators.
        A `foreign` credential (one the pool does not hold: a caller's own list) is recorded
        and honoured too, but bounded apart: it never arms the capacity guard nor takes the
        place of a held key's entry, and past 1,024 per provider its oldest entry is dropped.
        """
        scope = CallScope(provider, model, quota_bucket, now, max_seconds)
        cooling = Cooling(
            credential_wide_auth, retry_after_seconds, fallback_seconds, sent_at, foreign
        )
        return self._recording.record(scope, credential, outcome, cooling)

    def record_budget(
        self,
        provider: str | CallScope,
        credential: str,
        *,
        model: str | None = None,
        quota_bucket: str | None = None,
        remaining: int,
        reset_seconds: float,
        limit: int | None = None,
        now: float | None = None,
        account: str | None = None,
        sent_at: float | None = None,
        attempt: Attempt | None = None,
    ) -> None:
        """A provider said `remaining` requests are left until its window resets (of `limit`,
        when it said that too: then they refill continuously towards it until the reset).
        With the label of the `account` the credential is in, the budget is the account's.
        It is as of `sent_at` (the `attempt`'s start, else `now`): an answer stamped earlier
        than the budget kept replaces nothing, and attempts started since spend from it."""
        accounts = None if account is None else {credential: account}
        scope = call_scope(
            provider, CallScope("", model, quota_bucket, now, 3600, accounts), "configured"
        )
        announced = (remaining, reset_seconds, limit)
        self._attempts.keep_budget("requests", scope, credential, announced, sent_at, attempt)

    def record_token_budget(
        self,
        provider: str | CallScope,
        credential: str,
        *,
        model: str | None = None,
        quota_bucket: str | None = None,
        remaining: int,
        reset_seconds: float,
        limit: int | None = None,
        now: float | None = None,
        account: str | None = None,
        sent_at: float | None = None,
        attempt: Attempt | None = None,
    ) -> None:
        """Like `record_budget`, for tokens: a request costing more than there are, less what
        attempts started since `sent_at` cost, waits until enough is back or goes to another
        key."""
        accounts = None if account is None else {credential: account}
        scope = call_scope(
            provider, CallScope("", model, quota_bucket, now, 3600, accounts), "configured"
        )
        announced = (remaining, reset_seconds, limit)
        self._attempts.keep_budget("tokens", scope, credential, announced, sent_at, attempt)

    def available(
        self,
        provider: str | CallScope,
        keys: Sequence[str],
        *,
        model: str | None = None,
        quota_bucket: str | None = None,
        max_seconds: int = 3600,
        now: float | None = None,
        legacy_rest_until: Mapping[str, float] | None = None,
        order: Order = "configured",
        cost: int | None = None,
        accounts: Mapping[str, str] | None = None,
    ) -> list[str]:
        """The keys not cooling for this scope, in the given order (or spread); with a
        `cost` (tokens), those whose token budget holds it. `accounts` maps a key to the
        label of the provider account it shares request and token budgets with."""
        given = CallScope("", model, quota_bucket, now, max_seconds, accounts, order, cost)
        scope = call_scope(provider, given, "configured")
        return self._selection.free("available", scope, keys, legacy_rest_until)

    def eligible(
        self,
        provider: str | CallScope,
        keys: Sequence[str],
        *,
        model: str | None = None,
        quota_bucket: str | None = None,
        max_seconds: int = 3600,
        now: float | None = None,
        legacy_rest_until: Mapping[str, float] | None = None,
        order: Order = "configured",
        cost: int | None = None,
        accounts: Mapping[str, str] | None = None,
    ) -> list[str]:
        """Like `available`, but an all-cooling non-empty key list raises the 429 `select` would."""
        given = CallScope("", model, quota_bucket, now, max_seconds, accounts, order, cost)
        scope = call_scope(provider, given, "configured")
        return self._selection.free("eligible", scope, keys, legacy_rest_until)

    def select(
        self,
        provider: str | CallScope,
        keys: Sequence[str],
        *,
        model: str | None = None,
        quota_bucket: str | None = None,
        max_seconds: int = 3600,
        now: float | None = None,
        legacy_rest_until: Mapping[str, float] | None = None,
        order: Order = "configured",
        cost: int | None = None,
        accounts: Mapping[str, str] | None = None,
    ) -> str | None:
        """The first key not cooling; `None` without keys; a 429 when every key cools."""
        given = CallScope("", model, quota_bucket, now, max_seconds, accounts, order, cost)
        scope = call_scope(provider, given, "configured")
        free = self._selection.free("select", scope, keys, legacy_rest_until)
        return free[0] if free else None

    def count_exhausted(self, now: float | None = None) -> None:
        """One of our 429s reached a caller: `exhausted_total` counts exactly those (a
        dispatch counts the one it raises, not the refusals its waits and rotation met)."""
        self._selection.count_exhausted(now)

    def admit(
        self,
        provider: str | CallScope,
        keys: Sequence[str],
        *,
        model: str | None = None,
        quota_bucket: str | None = None,
        max_seconds: int = 3600,
        now: float | None = None,
        legacy_rest_until: Mapping[str, float] | None = None,
        order: Order = "spread",
        exclude: Collection[str] = (),
        lease_seconds: float = 300.0,
        cost: int | None = None,
        accounts: Mapping[str, str] | None = None,
        cleared: list[str] | None = None,
    ) -> tuple[str, Attempt] | None:
        """Choose a key for one dispatch and count it in flight, in one step, so no two
        dispatches take the same probe. `None` when every free key is in `exclude` (or
        none is in rotation); the 429 (`ModelCooldownExhausted`) when none is free. A key an
        operator drained is never chosen; a key another process cleared since is added to
        `cleared` (its rest in `legacy_rest_until` no longer holds it). `cost` (tokens) is
        held against the key's token budget while the attempt is in flight; `accounts` (key
        -> label) makes the budgets of an account's keys one. End it with `settle` (or
        `finish`). A refusal here is not counted in `exhausted_total`: the caller may wait
        or rotate on; when the 429 reaches its client, `count_exhausted` says so (`dispatch`
        does)."""
        given = CallScope("", model, quota_bucket, now, max_seconds, accounts, order, cost)
        scope = call_scope(provider, given, "spread")
        return self._attempts.admit(scope, keys, legacy_rest_until, exclude, lease_seconds, cleared)

    def settle(
        self, attempt: Attempt, verdict: Verdict | None, *, served: bool, answered: bool = True
    ) -> float | None:
        """End one attempt in one call: what its answer proved (`verdict`: the key's
        cooldown or its clearing as of the attempt's start, its siblings' cooldowns, the
        budgets it announced, the refill it taught) and its release; with Redis, all of it in
        the attempt's one round trip. `None` for an attempt that got no answer or whose
        answer is not read. The key's deadline, when its answer cooled it."""
        return self._attempts.settle(attempt, verdict, served=served, answered=answered)

    def ending(self, attempt: Attempt) -> AbstractContextManager[None]:
        """The shared writes recorded in this block (the attempt's answer and budget) wait
        for `finish`, which sends them with the attempt's release in one round trip."""
        return self._attempts.ending(attempt)

    def finish(self, attempt: Attempt, *, served: bool, answered: bool = True) -> None:
        """The attempt's answer is recorded (or it failed): it is no longer in flight. One
        that got no answer (`answered=False`: a timeout, a refused connection) spends no
        provider budget."""
        self._attempts.finish(attempt, served=served, answered=answered)

    def explain(
        self,
        provider: str | CallScope,
        keys: Sequence[str],
        *,
        model: str | None = None,
        quota_bucket: str | None = None,
        max_seconds: int = 3600,
        now: float | None = None,
        legacy_rest_until: Mapping[str, float] | None = None,
        accounts: Mapping[str, str] | None = None,
        cost: int | None = None,
    ) -> list[tuple[Reason | None, float]]:
        """Per key, why it is not selectable and until when; `(None, 0.0)` when it is.

        The reason is the observation that holds the key longest: `"credential"` (or
        `"quota"` when that is a spent quota), `"scope"` or `"legacy"`; for a scope, a key
        free of those is held by `"probe"` while its probe is out and by `"budget"` while
        its announced request budget, or its tokens for a request of `cost` (default: one
        token), are spent (its account's, with `accounts` mapping a key to its account's
        label); a free key during an overflow is held by `"capacity"`.
        Counts nothing and raises no cooldown error: this is for operators, not routes.
        """
        given = CallScope("", model, quota_bucket, now, max_seconds, accounts, cost=cost)
        scope = call_scope(provider, given, "configured")
        return self.inspection.explain(scope, keys, legacy_rest_until)

    @property
    def entry_count(self) -> int:
        """Entries held as of the last prune; reading it does not prune."""
        return self.inspection.entry_count

    @property
    def capacity(self) -> int:
        return self.inspection.capacity

    def stats(self) -> dict[str, int | bool]:
        """Counts only: safe to expose on a status endpoint."""
        return self.inspection.stats()

    def attach_shared(self, shared: SharedObservations, *, secret: bytes) -> None:
        """Also record into, and select with, observations shared with other processes.

        Shared ids are HMACs under `secret`, so every process derives the same ones; local
        ids keep this store's own salt, so attaching never loses a local observation.
        """
        if not isinstance(secret, bytes):
            raise TypeError("secret must be bytes")
        if len(secret) < 32:
            raise ValueError("secret must be at least 32 bytes")
        self._state.shared = Sharing(shared, PreparedHmac(secret))
        self.waiters.recheck = SHARED_RECHECK_SECONDS

    @property
    def shared(self) -> SharedObservations | None:
        """The backend shared with other processes, or `None` for process-local state."""
        sharing = self._state.shared
        return None if sharing is None else sharing.backend

    def detach_shared(self) -> SharedObservations | None:
        """Back to process-local state; returns the detached backend for closing."""
        sharing, self._state.shared = self._state.shared, None
        self.waiters.recheck = None
        return None if sharing is None else sharing.backend

    def reset(self) -> None:
        """Forget every observation and counter; the salt, and so every id, is kept."""
        with self._state.lock:
            self._state.clear()
            self.refills.clear()
            self.operators.clear()
        self.waiters.reset_counts()


model_cooldown = ModelCooldown()
"""The one process-wide store every pool records into and selects from."""

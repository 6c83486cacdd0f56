"""What `dispatch` asks of the store: admit a key and count it in flight, end the attempt,
keep the provider's request budget.

With shared state attached, admission is one round trip that admits for every process at once
(in-flight counts, the probe after a release and budgets live in Redis), and the end of an
attempt is one more that writes its answer and releases it; when Redis does not answer, the
process-local bookkeeping decides, as without sharing.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Literal

from ..arguments import check_cost, finite_number, require_str, resolve_now
from ..digests import (
    account_message,
    credential_message,
    credential_prefix,
    scope_message,
)
from .admission import Attempt
from .backend import Announced
from .claims import Claim
from .ending import ENDING, checked_budget, require_attempt
from .events import Event
from .lookup import gather
from .operators import KeyActions
from .parts import StoreState
from .recording import Cooling, Recording
from .refills import RefillReadings
from .scope import CallScope
from .selection import Selection
from .shared_admission import admit_shared
from .verdict import Verdict

__all__ = ["Attempts"]


class Attempts:
    """Admits a key for one dispatch and counts it in flight; ends the attempt with what its
    answer proved. Composed of the store's selection, recording, drains and refill readings.
    """

    def __init__(
        self,
        state: StoreState,
        selection: Selection,
        recording: Recording,
        operators: KeyActions,
        refills: RefillReadings,
    ) -> None:
        self._state = state
        self._selection = selection
        self._recording = recording
        self._operators = operators
        self._refills = refills

    def admit(
        self,
        scope: CallScope,
        keys: Sequence[str],
        legacy_rest_until: Mapping[str, float] | None,
        exclude: Collection[str],
        lease_seconds: float,
        cleared: list[str] | None,
    ) -> tuple[str, Attempt] | None:
        """One dispatch's key, counted in flight (see `ModelCooldown.admit`)."""
        lease = finite_number(lease_seconds, "lease_seconds")
        if lease <= 0:
            raise ValueError("lease_seconds must be above 0")
        if isinstance(exclude, (str, bytes)) or not isinstance(exclude, Collection):
            raise TypeError("exclude must be a collection of keys, not a single string")
        claim = Claim(
            frozenset(exclude),
            lease,
            deferred=self._state.shared is not None,
            cost=check_cost(scope.cost),
            limits=scope.limits,
        )
        keys, legacy_rest_until = self._in_rotation(scope, keys, legacy_rest_until, cleared)
        taken = self._admitted(scope, keys, legacy_rest_until, claim)
        if taken is not None and self._in_windows(scope):  # as read now (see `settle`)
            taken = (taken[0], taken[1]._replace(reading="window"))
        if taken is not None and taken[1].probe:
            with self._state.lock:
                self._state.probes_total += 1
            sharing = self._state.shared
            if sharing is not None:
                sharing.backend.add_to_fleet("probes_total", taken[1].started)
        return taken

    def _in_windows(self, scope: CallScope) -> bool:
        """Does the provider refill this scope in windows, as learned so far?"""
        reading = self._refills.refill_reading(
            scope.provider, scope.model, scope.quota_bucket, now=scope.now
        )
        return reading == "window"

    def _in_rotation(
        self,
        scope: CallScope,
        keys: Sequence[str],
        legacy_rest_until: Mapping[str, float] | None,
        cleared: list[str] | None,
    ) -> tuple[Sequence[str], Mapping[str, float] | None]:
        """The keys no operator drained, and the legacy rests without those of keys another
        process cleared since (named in `cleared`)."""
        if (
            self._state.shared is None and not self._state.drained
        ):  # the common case: nothing to read
            return keys, legacy_rest_until
        followed: list[str] = []
        drained = self._operators.drained_keys(
            scope.provider, list(keys), now=scope.now, cleared=followed
        )
        if drained:
            keys = [key for key in keys if key not in drained]
        if followed:
            if cleared is not None:
                cleared.extend(followed)
            if legacy_rest_until:
                legacy_rest_until = {
                    key: rest for key, rest in legacy_rest_until.items() if key not in followed
                }
        return keys, legacy_rest_until

    def _admitted(
        self,
        scope: CallScope,
        keys: Sequence[str],
        legacy_rest_until: Mapping[str, float] | None,
        claim: Claim,
    ) -> tuple[str, Attempt] | None:
        """The key `claim` took: locally, or (with sharing) by the fleet's one round trip."""
        cost, sharing = claim.cost, self._state.shared
        # With sharing, the local answer only narrows the candidates: no lookup round trip.
        self._selection.choose(
            "eligible", gather(None, scope, keys, legacy_rest_until), scope.order, claim, cost
        )
        if sharing is None or not claim.candidates:
            return claim.taken
        answered, taken = admit_shared(self._state, sharing, claim, scope)
        if not answered:  # Redis did not answer: this process's bookkeeping decides
            local = Claim(claim.exclude, claim.lease, cost=cost, limits=scope.limits)
            lookup = gather(sharing, scope, keys, legacy_rest_until)
            self._selection.choose("eligible", lookup, scope.order, local, cost)
            return local.taken
        return taken

    @contextmanager
    def ending(self, attempt: Attempt) -> Iterator[None]:
        """See `ModelCooldown.ending`."""
        require_attempt(attempt)
        token = ENDING.set(attempt.shared)
        try:
            yield
        finally:
            ENDING.reset(token)

    def finish(
        self, attempt: Attempt, *, served: bool, answered: bool = True, provider: str | None = None
    ) -> None:
        """See `ModelCooldown.finish`; `provider`, when the caller knows whose key it was."""
        require_attempt(attempt)
        with self._state.lock:
            self._state.admission.finish(attempt, served=served, answered=answered)
        self._state.changed(Event("released", provider))  # it no longer holds its key
        sharing = self._state.shared
        if attempt.shared is not None and sharing is not None:  # no lock across the round trip
            sharing.backend.end(attempt.shared, served=served)

    def settle(
        self, attempt: Attempt, verdict: Verdict | None, *, served: bool, answered: bool = True
    ) -> float | None:
        """See `ModelCooldown.settle`: the verdict's writes (with Redis, held for the
        attempt's end), then the release."""
        require_attempt(attempt)
        deadline = None
        if verdict is not None:
            scope = verdict.scope
            if verdict.fixed == "auto" and self._refills.windows_shown(
                attempt.entry if attempt.account is None else attempt.account,
                _uncapped(verdict.requests, scope.max_seconds),
                _uncapped(verdict.tokens, scope.max_seconds),
            ):
                verdict = verdict._replace(refill="window")
            if verdict.refill is not None:
                self._refills.learn_refill(
                    scope.provider, scope.model, scope.quota_bucket, verdict.refill, now=scope.now
                )
            if attempt.shared is None:
                deadline = self._prove(attempt, verdict)
            else:  # the writes wait for the release: one round trip
                with self.ending(attempt):
                    deadline = self._prove(attempt, verdict)
                    attempt.shared.learned = verdict.learned
        provider = None if verdict is None else verdict.scope.provider
        self.finish(attempt, served=served, answered=answered, provider=provider)
        return deadline

    def _prove(self, attempt: Attempt, verdict: Verdict) -> float | None:
        """The writes of one answer, in the order they stamp: tokens, the key, its
        siblings, requests."""
        scope, key = verdict.scope, verdict.key
        windows = verdict.fixed == "window" or (
            verdict.fixed == "auto" and "window" in (attempt.reading, verdict.refill)
        )  # then all comes back at the reset: a budget is kept without its limit
        if verdict.tokens is not None:
            tokens, reset, limit = verdict.tokens
            limit = None if windows else limit
            self.keep_budget("tokens", scope, key, (tokens, reset, limit), None, attempt)
            if verdict.token_shortfall:
                return None  # the key's tokens are kept; smaller requests still fit
        deadline = self._cool(attempt, verdict, key, verdict.retry_after_seconds)
        if deadline is not None and verdict.siblings:
            remaining = max(0.0, deadline - resolve_now(scope.now))
            for sibling in verdict.siblings:  # until the same deadline
                self._cool(attempt, verdict, sibling, remaining)
        if verdict.requests is not None:
            requests, reset, limit = verdict.requests
            limit = None if windows else limit
            self.keep_budget("requests", scope, key, (requests, reset, limit), None, attempt)
        return deadline

    def _cool(
        self, attempt: Attempt, verdict: Verdict, key: str, advice: float | None
    ) -> float | None:
        cooling = Cooling(
            verdict.credential_wide_auth, advice, verdict.fallback_seconds, attempt.started
        )
        return self._recording.record(verdict.scope, key, verdict.outcome, cooling)

    def keep_budget(
        self,
        kind: Literal["requests", "tokens"],
        scope: CallScope,
        credential: str,
        announced: tuple[object, object, object],
        sent_at: float | None,
        attempt: Attempt | None,
    ) -> None:
        """Check an announced budget (remaining, reset seconds, limit or `None`), keep it
        for the credential (or its account in `scope.accounts`) as of its stamp and, inside
        an attempt's ending, hand it to the attempt's end for the shared state."""
        remaining, reset_seconds, limit = announced
        remaining, reset = checked_budget(remaining, reset_seconds)
        if limit is not None:
            limit, _ = checked_budget(limit, 0)
        if attempt is not None:
            require_attempt(attempt)
        located = self._budget_entry(scope, credential)
        if located is None:
            return
        entry, current_time = located
        stamp = current_time if attempt is None else attempt.started
        if sent_at is not None:
            stamp = min(current_time, resolve_now(sent_at))
        with self._state.lock:
            keep = (
                self._state.admission.budget
                if kind == "requests"
                else self._state.admission.token_budget
            )
            keep(
                entry,
                remaining,
                stamp + reset,
                limit,
                stamp,
                None if attempt is None else attempt.token,
            )
        kept = (remaining, stamp + reset, limit)
        ending = ENDING.get()
        if ending is not None:  # shared with the attempt's end, as of the same stamp
            if kind == "requests":
                ending.budget = kept
            else:
                ending.tokens = kept
            ending.stamp = stamp if ending.stamp is None else min(ending.stamp, stamp)
            ending.now = max(ending.now, current_time)

    def _budget_entry(self, scope: CallScope, credential: str) -> tuple[bytes, float] | None:
        """The (credential, scope) entry a budget belongs to, or its account's (account,
        scope) entry, and `now`; `None` unscoped."""
        message = scope_message(scope.model, scope.quota_bucket)
        prefix = credential_prefix(scope.provider)
        credential_part = credential_message(prefix, require_str(credential, "credential"))
        account = None if scope.accounts is None else scope.accounts.get(credential)
        if account is not None:
            if type(account) is not str or not account:
                raise TypeError("account must be a non-empty str or None")
            credential_part = account_message(prefix, account)
        if message is None:
            return None
        return self._state.digest(credential_part) + self._state.digest(message), resolve_now(
            scope.now
        )


def _uncapped(budget: Announced | None, max_seconds: float) -> Announced | None:
    """A budget whose reset the maximum did not cut short: a capped reset says nothing
    about the counter's period."""
    return budget if budget is not None and budget[1] < max_seconds else None

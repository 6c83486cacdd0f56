"""What a scoped `dispatch` does around each attempt: admit a key, record its answer as of the
attempt's start with the budget its headers announce, and end the attempt.

The legacy path (feature off, or no model) keeps the plain rotation loop with no bookkeeping.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..arguments import check_cost, resolve_now, usable_advice
from ..config import LARGEST_MAX_SECONDS, CooldownSettings, warn_once
from ..digests import scope_message
from ..errors import ModelCooldownExhausted
from ..evidence.advice import (
    RecordingContext,
    SelectionScope,
    recording_context,
    selection_scope,
)
from ..evidence.answers import Answer
from ..evidence.quota import QUOTA_SPENT, QuotaSpent, sdk_quota_spent
from ..evidence.ratelimit import request_budget, requests_remaining, token_budget
from ..store import Attempt, CallScope
from ..store.refills import Refill, RefillSetting
from ..store.verdict import Verdict
from ._common import CheckedEvidence, by_affinity, check_affinity, scoped_settings
from .recording import AUTH_REST_SECONDS, THROTTLE_REST_SECONDS, KeyRecording
from .request import Request
from .rotation import DispatchPath, Steps, Taken, check_rotate_on, rotation

__all__ = ["steps_for"]

UNKNOWN_COST_REST_SECONDS = 1.0
"""How long a key rests after a request of unknown size did not fit its tokens: the shortest
rest a throttle takes, since the next request may be smaller."""

SDK_RETRIES_WARNING = (
    "provider %s: the upstream client retried inside send (x-stainless-retry-count > 0); "
    "construct it with max_retries=0 so rotation, not the SDK, decides the next key"
)


def warn_sdk_retries(provider: str) -> None:
    """Once per provider per process: an SDK's own retries re-hit a throttled key."""
    warn_once(provider, SDK_RETRIES_WARNING)


BodyAdvice = Callable[[Any], object]
"""`advice(answer) -> seconds | QuotaSpent | None`: what a throttle's body advises."""
ADVICE_UNUSABLE = (
    "provider %s: advice= returned something that is neither seconds nor QuotaSpent; it is ignored"
)
ADVICE_FAILED = "provider %s: advice= raised; its advice is ignored"


def check_advice(advice: object) -> BodyAdvice | None:
    if advice is not None and not callable(advice):
        raise TypeError("advice must be a callable advice(answer) -> seconds or None")
    return advice


def quota_evidence(seconds: float | None) -> RecordingContext:
    """What a spent quota records: the key, and its account, out for every model."""
    return {"outcome": QUOTA_SPENT, "credential_wide_auth": True, "retry_after_seconds": seconds}


def evidence_reader(
    provider: str, advice: BodyAdvice | None
) -> Callable[[Answer], RecordingContext]:
    """What `dispatch` records of an answer: its headers' evidence; a spent quota for an SDK
    exception saying `insufficient_quota`; for a throttle, the later of the headers' advice
    and what `advice` reads in the answer's body (or the quota it says is spent). A bare 402
    is a caller error (one request may cost more than the credit left): only `advice`
    returning `QuotaSpent` makes it a spent quota."""

    def read(answer: Answer) -> RecordingContext:
        evidence = recording_context(answer.status, answer.headers)
        outcome = evidence.get("outcome")
        if outcome is None:  # the feature is off
            return evidence
        if answer.raised and sdk_quota_spent(answer.value):
            return quota_evidence(None)
        if advice is None:
            return evidence
        if answer.status == 402:
            advised_quota = _body_advice(provider, advice, answer.value)
            if isinstance(advised_quota, QuotaSpent):
                return quota_evidence(advised_quota.seconds)
            return evidence  # anything else a reader says of a 402 is ignored
        if outcome.credential_health != "throttled":
            return evidence
        advised = _body_advice(provider, advice, answer.value)
        if isinstance(advised, QuotaSpent):
            return quota_evidence(advised.seconds)
        header = evidence.get("retry_after_seconds")
        if advised is not None and (header is None or advised > header):
            evidence["retry_after_seconds"] = advised
        return evidence

    return read


def _body_advice(provider: str, advice: BodyAdvice, value: object) -> float | QuotaSpent | None:
    """The caller's reader, validated like `Retry-After`; a failure costs only its advice."""
    try:
        advised = advice(value)
    except Exception:  # its text may quote the body: never logged
        warn_once(provider, ADVICE_FAILED)
        return None
    if advised is None or isinstance(advised, QuotaSpent):
        return advised
    if usable_advice(advised):
        return float(min(advised, LARGEST_MAX_SECONDS))  # capped again where it is stored
    warn_once(provider, ADVICE_UNUSABLE)
    return None


class _LegacyDispatch:
    """The legacy path, exactly as before: no attempt bookkeeping."""

    def __init__(self, pool: KeyRecording, request: Request, scope: SelectionScope) -> None:
        self.pool, self.request, self.scope = pool, request, scope

    def admit(self, tried: set[str]) -> tuple[str, None] | None:
        provider, affinity, now = self.request.provider, self.request.affinity, self.request.now
        if not tried:
            key = self.pool.select(provider, affinity=affinity, now=now, **self.scope)
        else:
            free = self.pool.available(provider, affinity=affinity, now=now, **self.scope)
            key = next((key for key in free if key not in tried), None)
        return None if key is None else (key, None)

    def record(self, admitted: Taken, answer: Answer, evidence: RecordingContext) -> None:
        request = self.request
        self.pool.record(
            request.provider, admitted[0], answer.status, now=request.now, **self.scope, **evidence
        )

    def finish(self, admitted: Taken, served: bool, answered: bool) -> None:
        """Nothing to end."""


def steps_for(pool: KeyRecording, request: Request) -> Steps:
    """The loop's steps for one dispatch; its arguments checked before anything is sent."""
    provider = request.provider
    rotate_on = check_rotate_on(request.rotate_on)
    advice = check_advice(request.advice)
    cost = check_cost(request.cost)  # before anything is sent, whichever path
    scope = selection_scope(provider, request.model, quota_buckets=request.quota_buckets)
    if request.quota_bucket is not None and scope:
        scope["quota_bucket"] = request.quota_bucket
    current = scoped_settings(pool.store, scope.get("model"), scope.get("quota_bucket"), provider)
    path: DispatchPath
    if current is None:
        path = _LegacyDispatch(pool, request, scope)
    else:
        pool._usage.start(pool)  # first use: its usage readers, if any, begin reading
        path = _ScopedDispatch(pool, request, scope, current, cost)
    return rotation(
        path,
        rotate_on=rotate_on,
        retried=lambda: warn_sdk_retries(provider),
        read=evidence_reader(provider, advice),
    )


class _ScopedDispatch:
    """One scoped dispatch's attempts: the settings and scope are read once per dispatch."""

    def __init__(
        self,
        pool: KeyRecording,
        request: Request,
        scope: SelectionScope,
        current: CooldownSettings,
        cost: int | None,
    ) -> None:
        self.pool, self.current = pool, current
        provider, now = request.provider, request.now
        self.wait_until = time.monotonic() + request.wait.seconds  # until when it may wait
        self.gone = request.wait.gone  # set when an adispatch's caller is gone
        self.store, self.learner = pool.store, pool._learner
        self.affinity = check_affinity(request.affinity)
        self.scope = CallScope(  # its accounts are read with the keys, at each admission
            provider,
            scope.get("model"),
            scope.get("quota_bucket"),
            now,
            current.max_seconds,
            order="configured" if self.affinity is not None else request.order,
            cost=cost,
            limits=pool.declared_limits(provider),
        )
        self.declared_cost = cost  # the caller's; the scope's grows with what answers prove
        self.verdicts: dict[int, Verdict] = {}  # by attempt token: read, not yet settled
        registered = pool._provider(provider)
        self.fixed: RefillSetting = "auto" if registered is None else registered.refill

    def admit(self, tried: set[str]) -> tuple[str, Attempt] | None:
        """The next key, counted in flight; when none is free, wait for the earliest within
        the dispatch's `wait` (a key tried already comes back once its cooldown ended)."""
        try:
            return self._admit_once(tried)
        except ModelCooldownExhausted as refusal:
            waiting_from = time.monotonic()
            if self.wait_until <= waiting_from:
                raise
            taken = self.store.waiters.wait(
                self.scope,
                refusal,
                lambda: self._admit_once(set(), waited=time.monotonic() - waiting_from),
                seconds=self.wait_until - waiting_from,
                max_waiters=self.current.max_waiters,
                gone=self.gone,
            )
            if taken is not None and self.gone is not None and self.gone.is_set():
                self.store.finish(taken[1], served=False, answered=False)  # its caller left
                raise refusal from None
            return taken

    def _admit_once(self, tried: set[str], waited: float = 0.0) -> tuple[str, Attempt] | None:
        """One admission; a caller's own clock (`now=`) moves on by the time waited."""
        pool, provider = self.pool, self.scope.provider
        configured = pool.keys(provider)
        if not configured:
            return None
        current_time = resolve_now(self.scope.now)
        if self.scope.now is not None:
            current_time += waited
        rests = pool._legacy.live(provider, configured, current_time, self.current.max_seconds)
        self.scope = self.scope._replace(accounts=pool._labels(provider, configured))
        candidates = configured
        if self.affinity is not None:
            candidates = by_affinity(candidates, self.affinity)
        cleared: list[str] = []  # another process cleared these: this pool's rests go too
        try:
            taken = self.store.admit(
                self.scope._replace(now=current_time),
                candidates,
                legacy_rest_until=rests,
                exclude=tried,
                lease_seconds=self.current.lease_seconds,
                cleared=cleared,
            )
        finally:
            for key in cleared:
                pool._legacy.clear(provider, key)
        if taken is not None and taken[1].shared is not None and self.current.learn != "off":
            learned = taken[1].shared.learned
            if learned is not None:  # the fleet's estimate, read with the admission
                self.learner.adopt(
                    provider, taken[0], self._scope_message(), learned, now=current_time
                )
        return taken

    def record(
        self, admitted: tuple[str, Attempt], answer: Answer, evidence: RecordingContext
    ) -> None:
        """Read the answer once into the attempt's verdict; `finish` settles it with the store
        (as of the attempt's start, with the budgets its headers announce: with shared state,
        in one round trip with the attempt's release)."""
        key, attempt = admitted
        refill = None
        if self.fixed == "auto" and attempt.refilled is not None:
            refill = self._refill_lesson(attempt, answer)
        checked = CheckedEvidence.from_call(
            answer.status, evidence.get("outcome"), evidence.get("credential_wide_auth")
        )
        advice = evidence.get("retry_after_seconds")
        # A budget is kept as of its request's start, so a reset given as a moment (a date,
        # a Unix time) is read from then: read from now, it would end early by the latency.
        elapsed = max(0.0, resolve_now(self.scope.now) - attempt.started)
        received_at = time.time() - elapsed
        tokens = token_budget(answer.headers, received_at) if answer.headers else None
        requests = request_budget(answer.headers, received_at) if answer.headers else None
        scope, current = self.scope, self.current
        fallback = checked.learned_fallback(
            self.learner,
            scope,
            key,
            advice,
            current,
            checked.fallback(current, rejected=AUTH_REST_SECONDS, otherwise=THROTTLE_REST_SECONDS),
        )
        cools_siblings = checked.quota_spent or checked.outcome.credential_health == "throttled"
        shortfall = tokens is not None and self._token_shortfall(answer, tokens[0])
        if tokens is not None and self._unknown_cost_short(attempt, answer, tokens):
            # Its next key must hold more tokens than this one had; this key rests a second,
            # alone: the next request, of another unknown size, may well fit.
            self.scope = scope._replace(cost=max(scope.cost or 0, tokens[0] + 1))
            advice, cools_siblings = UNKNOWN_COST_REST_SECONDS, False
        self.verdicts[attempt.token] = Verdict(
            scope,
            key,
            checked.outcome,
            checked.credential_wide_auth,
            advice,
            fallback,
            None if requests is None else self._announced(requests),
            None if tokens is None else self._announced(tokens),
            shortfall,
            tuple(self.pool.siblings(scope.provider, key)) if cools_siblings else (),
            refill,
            self.learner.export(scope.provider, key, self._scope_message())
            if attempt.shared is not None
            else None,
            self.fixed,
        )

    def finish(self, admitted: tuple[str, Attempt], served: bool, answered: bool) -> None:
        """Settle the attempt with the store in one call; then mirror into the pool's legacy
        rests what unscoped selection must see (a genuine auth rejection, a spent quota)."""
        attempt = admitted[1]
        verdict = self.verdicts.pop(attempt.token, None)
        deadline = self.store.settle(attempt, verdict, served=served, answered=answered)
        if verdict is not None and deadline is not None:
            checked = CheckedEvidence(verdict.outcome, verdict.credential_wide_auth)
            self.pool._mirror_legacy(
                verdict.scope, verdict.key, checked, verdict.siblings, deadline
            )

    def _announced(self, announced: tuple[int, float, int | None]) -> tuple[int, float, int | None]:
        """A budget as kept: its reset capped at the maximum."""
        remaining, reset, limit = announced
        return remaining, min(reset, self.current.max_seconds), limit

    def _refill_lesson(self, attempt: Attempt, answer: Answer) -> Refill | None:
        """An attempt only the refill admitted: served, the provider refills as announced;
        answered 429 with that counter spent again, it refills in windows, but only when no
        key sharing the counter unseen could have spent the refill: the provider's only key,
        or keys whose accounts are declared. (The store also learns windows from the shape
        of any key's budgets, which no sibling can fake.)"""
        if 200 <= answer.status < 300:
            return "continuous"
        if answer.status != 429 or not answer.headers or attempt.reading == "window":
            return None
        if not self.scope.accounts and len(self.pool.keys(self.scope.provider)) > 1:
            return None  # a sibling's collision looks the same
        if attempt.refilled == "requests":
            spent = requests_remaining(answer.headers) == 0
        else:
            tokens = token_budget(answer.headers, time.time())
            spent = tokens is not None and tokens[0] < (self.scope.cost or 1)
        return "window" if spent else None

    def _token_shortfall(self, answer: Answer, tokens_left: int) -> bool:
        """A 429 with requests left and fewer tokens than this request costs: a shortfall
        of this request, not a spent window."""
        cost = self.declared_cost
        if answer.status != 429 or cost is None or tokens_left >= cost:
            return False
        return _requests_left(answer)

    def _unknown_cost_short(
        self, attempt: Attempt, answer: Answer, tokens: tuple[int, float, int | None]
    ) -> bool:
        """Without `cost`, a 429 with requests left and tokens short of their announced limit,
        from a counter that refills continuously: this request's tokens did not fit (what
        else refuses a request with requests left?). In windows, a spent window's tokens."""
        tokens_left, _, limit = tokens
        if answer.status != 429 or self.declared_cost is not None:
            return False
        if limit is None or tokens_left >= limit:
            return False
        if "window" in (self.fixed, attempt.reading):
            return False
        return _requests_left(answer)

    def _scope_message(self) -> bytes:
        message = scope_message(self.scope.model, self.scope.quota_bucket)
        assert message is not None  # the scoped path has a model or a bucket
        return message


def _requests_left(answer: Answer) -> bool:
    requests = requests_remaining(answer.headers)
    return requests is not None and requests > 0

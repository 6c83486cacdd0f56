"""What a scoped `dispatch` does around each attempt: admit a key, record its answer as of the
attempt's start with the budget its headers announce, and end the attempt (SPEC §15).

The legacy path (feature off, or no model) keeps the wave-2 loop with no bookkeeping.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ..advice import QuotaBuckets, RecordingContext, SelectionScope, selection_scope
from ..arguments import resolve_now
from ..digests import scope_message
from ..headers import Headers, lowered_headers
from ..learn import window_learner
from ..ratelimit import request_budget
from ..store import Attempt, Order, model_cooldown
from ._common import by_affinity, check_affinity, scoped_settings
from .rotation import Steps, rotation

if TYPE_CHECKING:
    from .credential import CredentialPool

__all__ = ["steps_for"]


def _keyed(key: str | None) -> tuple[str, None] | None:
    """A legacy selection as an admission with nothing to end."""
    return None if key is None else (key, None)


def steps_for(
    pool: type[CredentialPool],
    provider: str,
    model: str | None,
    quota_bucket: str | None,
    affinity: str | None,
    quota_buckets: QuotaBuckets | None,
    now: float | None,
    order: Order,
) -> Steps:
    scope = selection_scope(provider, model, quota_buckets=quota_buckets)
    if quota_bucket is not None and scope:
        scope["quota_bucket"] = quota_bucket
    if scoped_settings(scope.get("model"), scope.get("quota_bucket")) is None:
        return rotation(  # the legacy path, exactly as before: no attempt bookkeeping
            first=lambda: _keyed(pool.select(provider, affinity=affinity, now=now, **scope)),
            rest=lambda tried: _keyed(
                next(
                    (
                        key
                        for key in pool.available(provider, affinity=affinity, now=now, **scope)
                        if key not in tried
                    ),
                    None,
                )
            ),
            record=lambda admitted, status, headers, evidence: pool.record(
                provider, admitted[0], status, now=now, **scope, **evidence
            ),
            finish=lambda admitted, served: None,
        )
    return rotation(
        first=lambda: _admit(pool, provider, scope, affinity, order, set(), now),
        rest=lambda tried: _admit(pool, provider, scope, affinity, order, tried, now),
        record=lambda admitted, status, headers, evidence: _record_attempt(
            pool, provider, scope, admitted, status, headers, evidence, now
        ),
        finish=lambda admitted, served: model_cooldown.finish(admitted[1], served=served),
    )


def _admit(
    pool: type[CredentialPool],
    provider: str,
    scope: SelectionScope,
    affinity: str | None,
    order: Order,
    tried: set[str],
    now: float | None,
) -> tuple[str, Attempt] | None:
    """The next key for a scoped dispatch, counted in flight (SPEC §15)."""
    current = scoped_settings(scope.get("model"), scope.get("quota_bucket"))
    candidates = pool.keys(provider)
    if current is None or not candidates:
        return None
    current_time = resolve_now(now)
    rests = pool._legacy.live(provider, candidates, current_time)
    if check_affinity(affinity) is not None:  # rendezvous order, skipping keys not free
        candidates, order = by_affinity(candidates, affinity), "configured"
    taken = model_cooldown.admit(
        provider,
        candidates,
        model=scope.get("model"),
        quota_bucket=scope.get("quota_bucket"),
        max_seconds=current.max_seconds,
        now=current_time,
        legacy_rest_until=rests,
        order=order,
        exclude=tried,
        lease_seconds=current.lease_seconds,
    )
    if taken is not None and current.learn != "off":
        key, attempt = taken
        if attempt.shared is not None and attempt.shared.learned is not None:
            window_learner.adopt(
                provider, key, _scope(scope), attempt.shared.learned, now=current_time
            )
    return taken


def _scope(scope: SelectionScope) -> bytes:
    message = scope_message(scope.get("model"), scope.get("quota_bucket"))
    assert message is not None  # the scoped path has a model or a bucket
    return message


def _record_attempt(
    pool: type[CredentialPool],
    provider: str,
    scope: SelectionScope,
    admitted: tuple[str, Attempt],
    status: int,
    headers: Headers,
    evidence: RecordingContext,
    now: float | None,
) -> None:
    """Record the answer as of the attempt's start; keep the budget its headers announce."""
    key, attempt = admitted
    budget = request_budget(lowered_headers(headers), time.time())
    with model_cooldown.ending(attempt):  # shared writes go with the attempt's end
        pool.record(provider, key, status, now=now, **scope, **evidence, sent_at=attempt.started)
        if attempt.shared is not None:  # the fleet learns what this answer taught
            attempt.shared.learned = window_learner.export(provider, key, _scope(scope))
        if budget is not None:
            model_cooldown.record_budget(
                provider,
                key,
                model=scope.get("model"),
                quota_bucket=scope.get("quota_bucket"),
                remaining=budget[0],
                reset_seconds=budget[1],
                now=now,
            )

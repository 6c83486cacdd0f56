"""How a provider pool learns from one answer: a provider-wide rest on the legacy path, the
store's scoped cooldown otherwise."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..arguments import resolve_now
from ..config import CooldownSettings
from ..evidence.headers import header_value
from ..evidence.learn import WindowLearner
from ..evidence.outcome import UpstreamOutcome
from ..store import CallScope
from ._common import (
    CheckedEvidence,
    Observation,
    check_evidence,
    scoped_settings,
    status_code,
    store_evidence,
)
from .default import pool_method
from .selecting import KeySelection

__all__ = ["AUTH_REST_SECONDS", "THROTTLE_REST_SECONDS", "KeyRecording"]

AUTH_REST_SECONDS = 300.0
THROTTLE_REST_SECONDS = 60.0


def bearer_token(headers: Mapping[str, str]) -> str | None:
    value = header_value(headers, "Authorization")
    if isinstance(value, str):
        scheme, _, token = value.strip().partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
    return None


class KeyRecording(KeySelection):
    """`record` and `record_headers`, mixed into `CredentialPool` over its selection."""

    _learner: WindowLearner  # the windows learned from this pool's throttles

    # -- recording ----------------------------------------------------------------------------

    @pool_method
    def record(
        self,
        provider: str,
        key: str | None,
        status: int,
        *,
        now: float | None = None,
        model: str | None = None,
        quota_bucket: str | None = None,
        outcome: UpstreamOutcome | None = None,
        credential_wide_auth: bool | None = None,
        retry_after_seconds: float | None = None,
        sent_at: float | None = None,
    ) -> None:
        """Learn from one upstream answer made with `key`; `sent_at` is when its request
        started (monotonic; default now), so a success sent before a throttle reopens nothing.
        A key the pool does not hold (a caller's own list) is recorded and honoured too, but
        bounded apart: its entries never fill the table the pool's own keys need."""
        status = status_code(status)
        check_evidence(outcome, credential_wide_auth)
        current = scoped_settings(self.store, model, quota_bucket, provider)
        if key is None or key == "" or provider not in self._providers:
            return
        if not isinstance(key, str):
            raise TypeError("key must be a str")
        if current is None:
            self._record_legacy(provider, key, status, resolve_now(now))
            return
        evidence = CheckedEvidence.from_call(status, outcome, credential_wide_auth)
        scope = CallScope(provider, model, quota_bucket, now, current.max_seconds)
        foreign = key not in self.keys(provider)
        seen = Observation(key, evidence, retry_after_seconds, sent_at, foreign)
        self._record_scoped(scope, seen, current)

    @pool_method
    def _record_scoped(
        self, scope: CallScope, seen: Observation, current: CooldownSettings
    ) -> None:
        """`record` on the scoped path, its arguments checked (a usage reading's spent
        quota comes this way too): the key's cooldown, then its siblings'. The store reads
        the clock itself when `scope.now` is None. A `foreign` key (not the pool's) has no
        siblings and learns no window."""
        key, evidence, _, _, foreign = seen
        fallback = evidence.fallback(
            current, rejected=AUTH_REST_SECONDS, otherwise=THROTTLE_REST_SECONDS
        )
        # no pool lock: the store may reach Redis
        deadline = store_evidence(self.store, self._learner, scope, seen, fallback, current)
        if deadline is None:
            return
        siblings = () if foreign else self._cool_siblings(scope, key, evidence, deadline, current)
        self._mirror_legacy(scope, key, evidence, siblings, deadline, foreign)

    @pool_method
    def _mirror_legacy(
        self,
        scope: CallScope,
        key: str,
        evidence: CheckedEvidence,
        siblings: Sequence[str],
        deadline: float,
        foreign: bool = False,
    ) -> None:
        """What unscoped selection must see of an answer that cooled its key until
        `deadline`: a genuine auth rejection of the key, a spent quota of its account (the
        `siblings` its cooldown reached)."""
        provider, now = scope.provider, resolve_now(scope.now)
        if evidence.rejected_wide:
            self._legacy.rest(provider, key, deadline, now, keep_later=True, foreign=foreign)
        if evidence.quota_spent:
            for sibling in siblings:
                self._legacy.rest(provider, sibling, deadline, now, keep_later=True)

    @pool_method
    def _cool_siblings(
        self,
        scope: CallScope,
        key: str,
        evidence: CheckedEvidence,
        deadline: float,
        current: CooldownSettings,
    ) -> list[str]:
        """A throttle of one key of an account is its siblings' too: the same scope cools for
        each of them until the same deadline; a spent quota is the account's, so it holds
        each of them for every model. An auth rejection stays the one key's. The siblings
        cooled."""
        spent = evidence.quota_spent
        if not (spent or evidence.outcome.credential_health == "throttled"):
            return []
        siblings = self.siblings(scope.provider, key)
        remaining = max(0.0, deadline - resolve_now(scope.now))
        for sibling in siblings:  # no pool lock: the store may reach Redis
            self.store.record(
                scope.provider,
                sibling,
                evidence.outcome,
                model=scope.model,
                quota_bucket=scope.quota_bucket,
                credential_wide_auth=spent,
                retry_after_seconds=remaining,
                max_seconds=current.max_seconds,
                now=scope.now,
            )
        return siblings

    @pool_method
    def _record_legacy(self, provider: str, key: str, status: int, now: float) -> None:
        """Rest the key provider-wide; a new rest replaces the old one, as the legacy pools did."""
        if status in (401, 402, 403):
            self._legacy.rest(provider, key, now + AUTH_REST_SECONDS, now, keep_later=False)
        elif status == 429:
            self._legacy.rest(provider, key, now + THROTTLE_REST_SECONDS, now, keep_later=False)
        elif 200 <= status < 300:
            self._legacy.clear(provider, key)

    @pool_method
    def record_headers(
        self,
        provider: str,
        headers: Mapping[str, str],
        status: int,
        *,
        now: float | None = None,
        model: str | None = None,
        quota_bucket: str | None = None,
        outcome: UpstreamOutcome | None = None,
        credential_wide_auth: bool | None = None,
        retry_after_seconds: float | None = None,
    ) -> None:
        """`record` for the key in the request's `Authorization: Bearer` header."""
        key = bearer_token(headers)
        if key is not None:
            self.record(
                provider,
                key,
                status,
                now=now,
                model=model,
                quota_bucket=quota_bucket,
                outcome=outcome,
                credential_wide_auth=credential_wide_auth,
                retry_after_seconds=retry_after_seconds,
            )

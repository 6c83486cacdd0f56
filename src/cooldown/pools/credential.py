"""Codex Everywhere style provider pools: keys from numbered environment variables."""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Mapping
from typing import ClassVar, TypeVar

from ..arguments import resolve_now
from ..config import CooldownSettings
from ..evidence.advice import QuotaBuckets
from ..evidence.headers import header_value
from ..evidence.outcome import UpstreamOutcome
from ..forksafe import new_lock
from ..status import PoolStatus, keys_status
from ..store import Order
from ._common import (
    ScopedRecording,
    check_evidence,
    scoped_settings,
    shared_state_configured,
    status_code,
    store_evidence,
)
from .dispatching import steps_for
from .legacy import LegacyRests
from .rotation import arotate, refuse_coroutine_function, rotate
from .selecting import KeySelection

__all__ = ["CredentialPool"]

_Response = TypeVar("_Response")

AUTH_REST_SECONDS = 300.0
THROTTLE_REST_SECONDS = 60.0
ENV_PREFIX = "CODEX_EVERYWHERE_API_KEY"


def bearer_token(headers: Mapping[str, str]) -> str | None:
    value = header_value(headers, "Authorization")
    if isinstance(value, str):
        scheme, _, token = value.strip().partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
    return None


class CredentialPool(KeySelection):
    """Provider key pools, used on the class: `CredentialPool.select("ce-gpt-plus")`.

    Legacy behaviour (feature off, or no model/bucket on the call) rests a key provider-wide
    in this class's own map. The scoped path records into the shared `model_cooldown` store
    and only mirrors genuine credential-wide auth rejections into the legacy map.
    """

    _lock: ClassVar[threading.Lock]  # the registry; never held across Redis
    _legacy: ClassVar[LegacyRests] = LegacyRests()
    _providers: ClassVar[dict[str, str]] = {
        "ce-gpt-plus": f"{ENV_PREFIX}_GPT_PLUS_POOL",
        "ce-gpt-pro": f"{ENV_PREFIX}_GPT_PRO_POOL",
        "ce-grok-heavy": f"{ENV_PREFIX}_GROK_HEAVY",
        "ce-claude-kiro-cheap": f"{ENV_PREFIX}_CLAUDE_UNSTABLE",
        "ce-claude-kiro": f"{ENV_PREFIX}_CLAUDE_KIRO",
        "ce-claude-max": f"{ENV_PREFIX}_CLAUDE_MAX",
        "ce-image": f"{ENV_PREFIX}_GPT_IMAGE",
    }

    # -- registry -----------------------------------------------------------------------------

    @classmethod
    def register(cls, provider: str, base_env: str) -> None:
        """Pool `provider`'s keys from `base_env` and `base_env_<n>`."""
        if not isinstance(provider, str) or not provider:
            raise ValueError("provider must be a non-empty str")
        if not isinstance(base_env, str) or not base_env:
            raise ValueError("base_env must be a non-empty str")
        with cls._lock:
            cls._providers[provider] = base_env

    @classmethod
    def pooled(cls, provider: str) -> bool:
        return provider in cls._providers

    @classmethod
    def providers(cls) -> list[str]:
        """Every registered provider, in registration order."""
        return list(cls._providers)

    # -- recording ----------------------------------------------------------------------------

    @classmethod
    def record(
        cls,
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
        started (monotonic; default now), so a success sent before a throttle reopens nothing."""
        status = status_code(status)
        check_evidence(outcome, credential_wide_auth)
        current = scoped_settings(model, quota_bucket)
        if key is None or key == "" or provider not in cls._providers:
            return
        if not isinstance(key, str):
            raise TypeError("key must be a str")
        if current is None:
            cls._record_legacy(provider, key, status, resolve_now(now))
            return
        evidence = ScopedRecording.from_call(status, outcome, credential_wide_auth)
        cls._record_scoped(
            provider, key, evidence, model, quota_bucket, retry_after_seconds, current, now, sent_at
        )

    @classmethod
    def _record_scoped(
        cls,
        provider: str,
        key: str,
        evidence: ScopedRecording,
        model: str | None,
        quota_bucket: str | None,
        retry_after_seconds: float | None,
        current: CooldownSettings,
        now: float | None,
        sent_at: float | None,
    ) -> None:
        """`record` on the scoped path, its arguments checked (`dispatch` calls it directly)."""
        deadline = store_evidence(  # no pool lock: the store may reach Redis
            provider,
            key,
            evidence,
            model=model,
            quota_bucket=quota_bucket,
            retry_after_seconds=retry_after_seconds,
            fallback_seconds=evidence.fallback(
                rejected=AUTH_REST_SECONDS, otherwise=THROTTLE_REST_SECONDS
            ),
            current=current,
            now=now,  # checked by the store, which reads the clock itself when it is None
            sent_at=sent_at,
        )
        if evidence.rejected_wide and deadline is not None:
            # Unscoped selection must see a genuine auth failure too.
            cls._legacy.rest(provider, key, deadline, resolve_now(now), keep_later=True)

    @classmethod
    def _record_legacy(cls, provider: str, key: str, status: int, now: float) -> None:
        """Rest the key provider-wide; a new rest replaces the old one, as the legacy pools did."""
        if status in (401, 402, 403):
            cls._legacy.rest(provider, key, now + AUTH_REST_SECONDS, now, keep_later=False)
        elif status == 429:
            cls._legacy.rest(provider, key, now + THROTTLE_REST_SECONDS, now, keep_later=False)
        elif 200 <= status < 300:
            cls._legacy.clear(provider, key)

    @classmethod
    def record_headers(
        cls,
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
            cls.record(
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

    @classmethod
    def dispatch(
        cls,
        provider: str,
        send: Callable[[str], _Response],
        *,
        model: str | None = None,
        quota_bucket: str | None = None,
        affinity: str | None = None,
        quota_buckets: QuotaBuckets | None = None,
        now: float | None = None,
        order: Order = "spread",
    ) -> _Response | None:
        """Select, `send(key)`, record, and rotate to an untried key after a key problem.

        Only the response's status and headers are read, so a streaming body is untouched.
        A `CooldownError` before the first attempt propagates (nothing was sent). After a
        throttle or auth rejection, when every key now cools for the scope, the 429
        (`ModelCooldownExhausted`) replaces that answer; otherwise the last response is
        returned. An exception from `send` cools nothing and is re-raised. `None` without
        calling `send` when no key is configured. `send` must be a plain function; an
        `async def send` goes to `adispatch`.
        """
        refuse_coroutine_function(send)
        steps = steps_for(cls, provider, model, quota_bucket, affinity, quota_buckets, now, order)
        return rotate(steps, send)

    @classmethod
    async def adispatch(
        cls,
        provider: str,
        send: Callable[[str], Awaitable[_Response]],
        *,
        model: str | None = None,
        quota_bucket: str | None = None,
        affinity: str | None = None,
        quota_buckets: QuotaBuckets | None = None,
        now: float | None = None,
        order: Order = "spread",
    ) -> _Response | None:
        """`dispatch` for an `async def send(key)` (httpx.AsyncClient, aiohttp).

        The same loop and rules as `dispatch`. With Redis sharing on, every step that may
        reach Redis runs in a worker thread, so the event loop never waits on it.
        """
        steps = steps_for(cls, provider, model, quota_bucket, affinity, quota_buckets, now, order)
        return await arotate(steps, send, offload=shared_state_configured())

    @classmethod
    def status(
        cls,
        provider: str,
        *,
        model: str | None = None,
        quota_bucket: str | None = None,
        now: float | None = None,
    ) -> PoolStatus:
        """Which configured key cools, why and for how long; computed now, nothing stored.

        Keys appear by 1-based position only: no key, digest, model or bucket name.
        """
        current = scoped_settings(model, quota_bucket)
        candidates = cls.keys(provider)
        current_time = resolve_now(now)
        rests = cls._legacy.live(provider, candidates, current_time)
        return keys_status(
            provider,
            candidates,
            rests,
            current,
            model=model,
            quota_bucket=quota_bucket,
            now=current_time,
        )

    @classmethod
    def reset(cls) -> None:
        """Forget every legacy rest (tests); registered providers stay."""
        cls._legacy.reset()


CredentialPool._lock = new_lock(CredentialPool)

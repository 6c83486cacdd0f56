"""Codex Everywhere style provider pools: keys from numbered environment variables."""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from ..arguments import resolve_now
from ..errors import ModelCooldownExhausted
from ..evidence.advice import QuotaBuckets
from ..evidence.learn import WindowLearner, window_learner
from ..evidence.usage import UsageReader, checked_reader
from ..forksafe import new_lock
from ..store import CallScope, ModelCooldown, Order, model_cooldown
from ..store.declared import day_zone as day_zone_of
from ..store.declared import declared_limits
from ..store.refills import REFILL_SETTINGS, RefillSetting
from ._common import (
    scoped_settings,
    shared_state_configured,
)
from .accounts import checked_accounts
from .actions import PoolActions
from .code_keys import CodeKeys, KeySource
from .default import own_store, pool_method
from .dispatching import steps_for
from .key_status import PoolExtras, PoolStatus, keys_status
from .legacy import LegacyRests
from .provider import Provider
from .recording import KeyRecording
from .request import Request
from .rotation import arotate, in_thread, refuse_coroutine_function, rotate
from .usage_readings import UsageReadings
from .waiting import Wait, checked_wait, step_threads, wait_threads

__all__ = ["CredentialPool"]

_Response = TypeVar("_Response")

ENV_PREFIX = "CODEX_EVERYWHERE_API_KEY"


def _variable_name(base_env: object) -> str:
    """A name the environment can hold: text the file system encoding takes, without `=`
    or NUL (anything else could never be set, and would break every status page)."""
    if not isinstance(base_env, str):
        raise TypeError("base_env must be a str")
    if not base_env or "=" in base_env or "\0" in base_env:
        raise ValueError("base_env must be a non-empty environment variable name")
    try:
        os.fsencode(base_env)
    except UnicodeEncodeError:
        raise ValueError("base_env must be a name the environment can hold") from None
    return base_env


BUILT_IN_PROVIDERS: Mapping[str, str] = {
    "ce-gpt-plus": f"{ENV_PREFIX}_GPT_PLUS_POOL",
    "ce-gpt-pro": f"{ENV_PREFIX}_GPT_PRO_POOL",
    "ce-grok-heavy": f"{ENV_PREFIX}_GROK_HEAVY",
    "ce-claude-kiro-cheap": f"{ENV_PREFIX}_CLAUDE_UNSTABLE",
    "ce-claude-kiro": f"{ENV_PREFIX}_CLAUDE_KIRO",
    "ce-claude-max": f"{ENV_PREFIX}_CLAUDE_MAX",
    "ce-image": f"{ENV_PREFIX}_GPT_IMAGE",
}
"""The providers every pool starts with, each read from its numbered variables."""


class CredentialPool(KeyRecording, PoolActions):
    """Provider key pools: `CredentialPool.select("ce-gpt-plus")` on the default object (the
    class), or on an object of your own, `pool = CredentialPool()`, that shares nothing with
    it or with any other (its registrations, rests, store and learned windows are its own).

    Legacy behaviour (feature off, or no model/bucket on the call) rests a key provider-wide
    in the pool's own map. The scoped path records into the pool's store (the process-wide
    `model_cooldown` for the default object) and only mirrors genuine credential-wide auth
    rejections into the legacy map.
    """

    # The class holds the default object's state; an object made with CredentialPool()
    # gets its own (`_start`).
    _lock: threading.Lock  # the registry; never held across Redis
    store: ModelCooldown  # where its scoped observations go (public: the status surface reads it)
    _learner: WindowLearner
    _legacy: LegacyRests
    _providers: dict[str, Provider]

    def __init__(self, store: ModelCooldown | None = None) -> None:
        """A pool with the built-in providers and nothing else in common with any other;
        `store` is where its scoped observations go (default: a new `ModelCooldown()`)."""
        self._start(self, own_store(store), WindowLearner())

    @staticmethod
    def _start(pool: object, store: ModelCooldown, learner: WindowLearner) -> None:
        """Fresh state on `pool` (the class, for its default object, or an object)."""
        state: Any = pool
        state._lock = new_lock(pool)
        state.store, state._learner = store, learner
        state._legacy = LegacyRests()
        state._providers = {name: Provider(name, base) for name, base in BUILT_IN_PROVIDERS.items()}
        state._usage = UsageReadings()

    def __repr__(self) -> str:
        return f"<CredentialPool providers={len(self._providers)}>"

    # -- registry -----------------------------------------------------------------------------

    @pool_method
    def register(
        self,
        provider: str,
        base_env: str | None = None,
        *,
        keys: KeySource | None = None,
        accounts: Mapping[str, Sequence[int | str]] | None = None,
        refill: RefillSetting = "auto",
        limits: Mapping[str, Mapping[str, int]] | None = None,
        day_zone: str = "UTC",
        usage: UsageReader | None = None,
    ) -> None:
        """Pool `provider`'s keys from the variables `base_env` and `base_env_<n>`, or from
        `keys`: a sequence of strings, or a zero-argument callable returning one (read again
        when its last result is more than a second old). `accounts` groups keys that share
        one provider account (`{"team-a": [1, 2]}`, 1-based positions): a throttle on one
        cools the scope for all of them. `refill` says how the provider's announced limits
        come back: `"continuous"`, `"window"` (all at once at the reset), or `"auto"`
        (continuous until an answer proves windows). `limits` declares what the provider
        documents (`{"requests": {"minute": 15, "day": 1500}}`): no attempt starts that
        would pass one, per key (or account) and model. `usage` reads a key's credit off the
        request path. Registering again replaces the provider's source (and its accounts,
        refill, limits and usage reader).

        Parameters:

        - `provider`: the name `dispatch`, `select` and the status page use.
        - `base_env`: the environment variable of the first key (`BASE`, then `BASE_1`...).
        - `keys`: the keys in code, or a callable returning them (a secret manager).
        - `accounts`: `{account label: [key positions or "k-..." labels]}`.
        - `refill`: `"auto"`, `"continuous"` or `"window"`.
        - `limits`: `{"requests" or "tokens": {"second", "minute", "hour" or "day": n}}`.
        - `day_zone`: where a day ends at midnight (an IANA zone name), or `"rolling"`.
        - `usage`: `reader(key)` returning a `Usage` or `None` (`cooldown.usage.openrouter`).
        """
        if not isinstance(provider, str):
            raise TypeError("provider must be a str")
        if not provider:
            raise ValueError("provider must be a non-empty str")
        if (base_env is None) == (keys is None):
            raise TypeError("register needs exactly one of base_env and keys")
        source: str | CodeKeys = (
            _variable_name(base_env) if keys is None else CodeKeys(provider, keys)
        )
        grouped = None if accounts is None else checked_accounts(provider, accounts)
        if refill not in REFILL_SETTINGS:
            raise ValueError(f"refill must be one of {REFILL_SETTINGS}")
        declared = declared_limits(limits, day_zone)
        zone = day_zone_of(day_zone)
        reader = checked_reader(usage)
        registered = Provider(provider, source, grouped, refill, declared, zone)
        with self._lock:
            self._providers[provider] = registered
            self._usage.reader(provider, reader)

    @pool_method
    def pooled(self, provider: str) -> bool:
        return provider in self._providers

    @pool_method
    def providers(self) -> list[str]:
        """Every registered provider, in registration order."""
        return list(self._providers)

    @pool_method
    def dispatch(
        self,
        provider: str,
        send: Callable[[str], _Response],
        *,
        model: str | None = None,
        quota_bucket: str | None = None,
        affinity: str | None = None,
        quota_buckets: QuotaBuckets | None = None,
        now: float | None = None,
        order: Order = "spread",
        rotate_on: Iterable[int] = (),
        advice: Callable[[Any], object] | None = None,
        cost: int | None = None,
        wait: float | None = None,
    ) -> _Response | None:
        """Select, `send(key)`, record, and rotate to an untried key after a key problem.

        `send` may return a response (only its status and headers are read, so a streaming
        body is untouched), an SDK raw response or stream, or a parsed result (a success,
        returned unchanged); or raise an exception carrying the upstream's answer
        (`raise_for_status()`, the SDKs' `APIStatusError`), recorded like that answer and
        re-raised when the loop ends on it. A `CooldownError` before the first attempt
        propagates (nothing was sent). After a throttle or auth rejection, when every key now
        cools for the scope, the 429 (`ModelCooldownExhausted`, never chained to the upstream's
        exception) replaces that answer. An exception without an answer (a timeout, a refused
        connection) cools nothing and propagates. `rotate_on` lists provider-failure statuses
        (500-599) that move to the next untried free key, cooling nothing. `advice(answer)`
        reads seconds from a throttle's body (`google_retry_delay`); the later of it and the
        headers' advice stands. `cost` is the request's tokens: held in flight against each
        key's token budget (from the providers' token headers), and a 429 that shows requests
        left but fewer tokens than `cost` records the tokens instead of cooling the key.
        `wait` (0 to 60 seconds; default `MODEL_COOLDOWN_WAIT_SECONDS`, itself 0): when no
        key is free, wait that long at most for the earliest one (a cooldown ending, a
        budget refilling, an attempt finishing) instead of raising at once; waiters are
        served first come, first served. `None` without calling `send` when no key is
        configured (or every key is drained).
        `send` must be a plain function; an `async def send` goes to `adispatch`.

        Parameters:

        - `provider`: the registered name whose keys to rotate.
        - `send`: `send(key)` makes the upstream request with that key.
        - `model`, `quota_bucket`: the upstream model (or its configured bucket) the
          cooldowns are kept for; neither: the legacy provider-wide path.
        - `affinity`: a conversation or prompt-cache id: the same free key for it.
        - `quota_buckets`: model -> bucket, for this call (else the setting).
        - `now`: a monotonic clock of the caller's (tests).
        - `order`: `"spread"` (default) or `"configured"`.
        - `rotate_on`: provider-failure statuses that move to the next key.
        - `advice`: reads seconds, or `QuotaSpent`, from a throttle's (or a 402's) body.
        - `cost`: the request's tokens.
        - `wait`: seconds to wait for a free key before the 429.
        """
        refuse_coroutine_function(send)
        request = Request(
            provider,
            model,
            quota_bucket,
            affinity,
            quota_buckets,
            now,
            order,
            rotate_on,
            advice,
            cost,
            Wait(checked_wait(wait)),
        )
        steps = steps_for(self, request)
        try:
            return rotate(steps, send)
        except ModelCooldownExhausted:
            self.store.count_exhausted()  # the 429 a client gets
            raise

    @pool_method
    async def adispatch(
        self,
        provider: str,
        send: Callable[[str], Awaitable[_Response]],
        *,
        model: str | None = None,
        quota_bucket: str | None = None,
        affinity: str | None = None,
        quota_buckets: QuotaBuckets | None = None,
        now: float | None = None,
        order: Order = "spread",
        rotate_on: Iterable[int] = (),
        advice: Callable[[Any], object] | None = None,
        cost: int | None = None,
        wait: float | None = None,
    ) -> _Response | None:
        """`dispatch` for an `async def send(key)` (httpx.AsyncClient, aiohttp, AsyncOpenAI).

        The same loop and rules as `dispatch`. With Redis sharing on, every step that may
        reach Redis (attaching to it included) runs in a worker thread, so the event loop
        never waits on it; so does a step that calls a `keys=` callable, and, with a `wait`,
        every step, in threads of its own (a waiting dispatch never holds up the loop).
        """
        seconds = checked_wait(wait)
        gone = threading.Event()  # set when this caller is cancelled: its waiter leaves
        request = Request(
            provider,
            model,
            quota_bucket,
            affinity,
            quota_buckets,
            now,
            order,
            rotate_on,
            advice,
            cost,
            Wait(seconds, gone),
        )
        build = functools.partial(steps_for, self, request)
        offload = (
            seconds > 0
            or self.store.shared is not None
            or shared_state_configured()
            or self._reads_keys_now(provider)
        )
        threads = step_threads() if offload else None
        waits = wait_threads() if seconds > 0 else None

        def leave() -> None:
            gone.set()
            self.store.waiters.leave(gone)

        try:
            if threads is None:
                return await arotate(build(), send, offload=None)
            steps = await in_thread(threads, build)
            return await arotate(steps, send, offload=threads, waits=waits, leave=leave)
        except ModelCooldownExhausted:  # the 429 a client gets; the fleet's count may reach
            if threads is not None:  # Redis: off the event loop
                await in_thread(threads, self.store.count_exhausted)
            else:
                self.store.count_exhausted()
            raise

    @pool_method
    def status(
        self,
        provider: str,
        *,
        model: str | None = None,
        quota_bucket: str | None = None,
        now: float | None = None,
        cost: int | None = None,
    ) -> PoolStatus:
        """Which configured key cools, why and for how long; computed now, nothing stored.

        Keys appear by 1-based position only: no key, digest, model or bucket name. With a
        `cost` (a request's tokens, as `dispatch` takes it) a key whose tokens cannot hold
        that request shows as held by `"budget"`, as `dispatch` would find it. `"refill"` is
        the reading `register` fixed, or under `"auto"` what the answers showed: `"window"`
        once any model learned it, `"continuous"` once an admission only the refill allowed
        was served, else `"unknown"`.

        Parameters:

        - `provider`: the registered name.
        - `model`, `quota_bucket`: the scope to explain (neither: unscoped selection's view).
        - `now`: a monotonic clock of the caller's (tests).
        - `cost`: a request's tokens, to show the keys that could not take it.
        """
        current = scoped_settings(self.store, model, quota_bucket)
        if current is not None:
            self._usage.start(self)  # first use: its usage readers, if any, begin reading
        candidates = self.keys(provider)
        current_time = resolve_now(now)
        maximum = None if current is None else current.max_seconds
        self._in_rotation(provider, candidates, current_time)  # follows the fleet's clears
        registered = self._provider(provider)
        fixed = "auto" if registered is None else registered.refill
        rests = self._legacy.live(provider, candidates, current_time, maximum)
        scope = CallScope(
            provider,
            model,
            quota_bucket,
            current_time,
            accounts=self._labels(provider, candidates),
            cost=cost,
            limits=self.declared_limits(provider),
        )
        extras = PoolExtras(None if fixed == "auto" else fixed, self._usage)
        return keys_status(self.store, scope, candidates, rests, current, extras)

    @pool_method
    def read_usage(self, *, now: float | None = None) -> int:
        """Read now each key whose usage reading is due (the background thread does this
        every second); how many readers were called. `now`: a monotonic clock (tests)."""
        return self._usage.read_due(self, now=now)

    @pool_method
    def reset(self) -> None:
        """Forget every legacy rest, where keys were first seen and every usage reading, and
        stop the usage thread (tests); registered providers stay."""
        self._legacy.reset()
        for registered in self._providers.values():
            registered.first_positions = {}
        self._usage.stop()


CredentialPool._start(CredentialPool, model_cooldown, window_learner)

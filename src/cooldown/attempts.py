"""What `dispatch` asks of the store: admit a key and count it in flight, end the attempt,
keep the provider's request budget (SPEC §15)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Mapping, Sequence

from .admission import Admission, Attempt, Claim, Order
from .arguments import finite_number, require_str, resolve_now
from .budget import DIGEST_SIZE
from .digests import PreparedHmac, credential_message, frame, scope_message

__all__ = ["Attempts"]


class Attempts:
    """Mixed into `ModelCooldown`: its selection (`_choose`) and lock, plus the bookkeeping."""

    _lock: threading.Lock
    _digest: PreparedHmac
    _admission: Admission
    _choose: Callable[..., list[str]]  # the store's one selection, under its lock

    def admit(
        self,
        provider: str,
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
    ) -> tuple[str, Attempt] | None:
        """Choose a key for one dispatch and count it in flight, in one step, so no two
        dispatches take the same probe. `None` when every free key is in `exclude`; the 429
        (`ModelCooldownExhausted`) when none is free. End it with `finish`."""
        if scope_message(model, quota_bucket) is None:
            raise ValueError("admit needs a model or a quota bucket")
        claim = Claim(frozenset(exclude), finite_number(lease_seconds, "lease_seconds"))
        args = (provider, keys, model, quota_bucket, max_seconds, now, legacy_rest_until)
        self._choose("eligible", *args, order=order, claim=claim)
        return claim.taken

    def finish(self, attempt: Attempt, *, served: bool) -> None:
        """The attempt's answer is recorded (or it failed): it is no longer in flight."""
        with self._lock:
            self._admission.finish(attempt, served=served, credential=attempt.entry[:DIGEST_SIZE])

    def record_budget(
        self,
        provider: str,
        credential: str,
        *,
        model: str | None = None,
        quota_bucket: str | None = None,
        remaining: int,
        reset_seconds: float,
        now: float | None = None,
    ) -> None:
        """A provider said `remaining` requests are left until its window resets."""
        scope = scope_message(model, quota_bucket)
        if scope is None:
            return
        message = credential_message(frame(require_str(provider, "provider")), credential)
        current_time = resolve_now(now)
        entry = self._digest(message) + self._digest(scope)
        with self._lock:
            self._admission.budget(entry, remaining, current_time + reset_seconds)

"""Exceptions a route can raise or let through; only the Flask module turns them into responses."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Literal, TypeAlias

__all__ = [
    "APIError",
    "CooldownError",
    "ExhaustedReason",
    "ModelCooldownCapacity",
    "ModelCooldownExhausted",
    "NanoGPTKeyPoolExhausted",
    "UpstreamError",
]


class APIError(Exception):
    """An error with an HTTP status and a JSON body, in the style of Flask's API-error pattern."""

    def __init__(
        self,
        message: str,
        status_code: int = 500,
        payload: Mapping[str, object] | None = None,
    ) -> None:
        if not isinstance(message, str):
            raise TypeError("message must be a str")
        if isinstance(status_code, bool) or not isinstance(status_code, int):
            raise TypeError("status_code must be an int")
        if not 100 <= status_code <= 599:
            raise ValueError("status_code must be an HTTP status (100 to 599)")
        if payload is not None and not isinstance(payload, Mapping):
            raise TypeError("payload must be a mapping or None")
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.payload = payload

    def to_dict(self) -> dict[str, object]:
        body = dict(self.payload or {})
        body["message"] = self.message
        return body


LARGEST_RETRY_AFTER = 2_147_483_647
"""The largest `MODEL_COOLDOWN_MAX_SECONDS`: no answer can advise waiting longer."""


class CooldownError(APIError):
    """Selection refused to dispatch; `retry_after` is whole seconds, from 1 to 2^31 - 1."""

    http_status: ClassVar[int] = 500
    code: ClassVar[str] = "model_cooldown"
    template: ClassVar[str] = "Retry after {seconds} seconds."

    def __init__(self, retry_after: int) -> None:
        if isinstance(retry_after, bool) or not isinstance(retry_after, int):
            raise TypeError("retry_after must be an int")
        self.retry_after = min(LARGEST_RETRY_AFTER, max(1, retry_after))
        super().__init__(
            self.template.format(seconds=self.retry_after),
            self.http_status,
            {"error": self.code, "retry_after": self.retry_after},
        )


ExhaustedReason: TypeAlias = Literal["quota", "limit", "cooling"]
EXHAUSTED_REASONS: tuple[ExhaustedReason, ...] = ("quota", "limit", "cooling")


class ModelCooldownExhausted(CooldownError):
    """Every configured key is cooling for this model or bucket; nothing was dispatched.

    `reason` says what holds most of the keys: `"quota"` (spent credit or a daily cap),
    `"limit"` (a limit declared at registration is reached) or `"cooling"` (anything else:
    a throttle, an auth rejection, a probe or budget); on a tie, in that order. When every
    key is out of quota or at its declared limit, the message says so."""

    http_status = 429
    code = "model_cooldown"
    template = "Every upstream key for this model is cooling down; retry after {seconds} seconds."
    spent_template: ClassVar[str] = (
        "Every upstream key for this model is out of quota or at its declared limit; "
        "retry after {seconds} seconds."
    )

    def __init__(
        self,
        retry_after: int,
        *,
        reason: ExhaustedReason = "cooling",
        every_key_spent: bool = False,
    ) -> None:
        if reason not in EXHAUSTED_REASONS:
            raise ValueError(f"reason must be one of {EXHAUSTED_REASONS}")
        super().__init__(retry_after)
        self.reason: ExhaustedReason = reason
        if every_key_spent:
            self.message = self.spent_template.format(seconds=self.retry_after)
            self.args = (self.message,)

    free_in_seconds: float | None = None
    """When the store raised it: how long until the earliest key frees, unrounded (a
    dispatch that may wait sleeps that long, not the whole `retry_after` seconds)."""
    awaits_attempts: bool = False
    """When the store raised it: a key is held only while attempts of this process are in
    flight on its budget, so one's end may free it sooner (a dispatch that may wait waits
    for that end rather than giving up at once)."""


class ModelCooldownCapacity(CooldownError):
    """The observation store is full; new traffic is refused rather than losing a cooldown."""

    http_status = 503
    code = "model_cooldown_capacity"
    template = "Cooldown tracking is at capacity; retry after {seconds} seconds."


class UpstreamError(APIError):
    """What a client is told of an upstream error answer no key could get past (with
    `init_app(..., upstream_errors=True)`): a status and a fixed message of ours."""

    code: ClassVar[str] = "upstream_error"

    def __init__(self, message: str, status_code: int) -> None:
        super().__init__(message, status_code, {"error": self.code})


class NanoGPTKeyPoolExhausted(RuntimeError):
    """No configured NanoGPT key can be used right now.

    Kept outside the `CooldownError` family on purpose: it is the legacy pools' answer (no
    key passed validation, or every key rests provider-wide), raised as the `RuntimeError`
    their callers already catch, and it carries no `Retry-After` a client could trust.
    """

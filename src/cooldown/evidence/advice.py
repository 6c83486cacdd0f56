"""Turn one upstream request and answer into the keywords the pools take."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from email.utils import parsedate_to_datetime
from typing import TypeAlias, TypedDict
from urllib.parse import unquote

from ..arguments import wall_clock
from ..config import app_setting, settings, warn_once
from .headers import Headers, header_value, lowered_headers
from .outcome import SPENT_WINDOW, UpstreamOutcome, classify_status, classify_upstream_outcome
from .ratelimit import lone_reset, millisecond_advice, spent_window_reset

__all__ = [
    "RecordingContext",
    "SelectionScope",
    "recording_context",
    "retry_after_seconds",
    "selection_scope",
    "upstream_model",
]

QUOTA_BUCKETS_CONFIG = "MODEL_COOLDOWN_QUOTA_BUCKETS"

QuotaBuckets: TypeAlias = Mapping[str, str | Mapping[str, str]]


def checked_quota_buckets(value: object) -> QuotaBuckets | None:
    """An app's `MODEL_COOLDOWN_QUOTA_BUCKETS` when it is usable: provider -> bucket, or
    provider -> {model: bucket}, all strings; anything else is `None` with one warning
    naming the setting (never its value), so a request never fails on it."""
    if value is None:
        return None
    if isinstance(value, Mapping) and all(
        isinstance(provider, str)
        and (
            isinstance(bucket, str)
            or (
                isinstance(bucket, Mapping)
                and all(isinstance(m, str) and isinstance(b, str) for m, b in bucket.items())
            )
        )
        for provider, bucket in value.items()
    ):
        return value
    warn_once(QUOTA_BUCKETS_CONFIG, "%s is malformed; no quota buckets apply")
    return None


class SelectionScope(TypedDict, total=False):
    """Keywords for `select`/`available` and `record`; empty while the feature is off."""

    model: str | None
    quota_bucket: str | None


class RecordingContext(TypedDict, total=False):
    """Evidence keywords for `record`; empty while the feature is off."""

    outcome: UpstreamOutcome
    credential_wide_auth: bool
    retry_after_seconds: float | None


def retry_after_seconds(
    headers: Headers | None, *, received_at: float | None = None
) -> float | None:
    """Seconds from an upstream `Retry-After`: delta-seconds or an HTTP-date.

    `received_at` is wall-clock time (`time.time()`), because an HTTP-date is; it is not
    called `now` so that nobody passes it to a pool, whose `now` is monotonic. Anything
    negative, non-finite or unparsable gives `None`: the pool falls back to its own duration.
    """
    moment = wall_clock(received_at)
    if headers is None:
        return None
    return _retry_after(header_value(headers, "Retry-After"), moment)


def _retry_after(value: object, received_at: float) -> float | None:
    if not isinstance(value, str):
        return None
    text = value.strip()
    if text.isascii() and text.isdigit():
        seconds = float(text) if len(text) < 300 else math.inf
        return seconds if math.isfinite(seconds) else None
    try:
        moment = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if moment.tzinfo is None:  # RFC 9110 dates are GMT; a zone-less one is not trusted
        return None
    try:
        remaining = moment.timestamp() - received_at
    except (OverflowError, ValueError, OSError):
        return None
    return max(0.0, remaining) if math.isfinite(remaining) else None


_PATH_MODEL = re.compile(r"(?:^|/)models/([^/]+)")


def upstream_model(body: object = None, path: object = None) -> str | None:
    """The model an OpenAI-style JSON body or a `/models/<name>` path names; never a guess.

    `body["model"]` when it is a non-empty string, else the path segment after `models/`
    (whatever follows it), without a Gemini-style `:<verb>`, percent-decoded afterwards so an
    encoded `/` or `:` stays in the name (e.g. `/v1beta/models/gemini%2D2.0:generateContent`
    is `gemini-2.0`, `/v1/models/gpt-4o/extra` is `gpt-4o`), else `None`.
    """
    if isinstance(body, Mapping):
        model = body.get("model")
        if isinstance(model, str) and model:
            return model
    if isinstance(path, str):
        found = _PATH_MODEL.search(path)
        if found:
            return _path_model(found.group(1))
    return None


def _path_model(segment: str) -> str | None:
    name, _, verb = segment.partition(":")
    if not name or ":" in verb:  # one `:verb` at most; more is not a path anyone sends
        return None
    try:
        return unquote(name, errors="strict") or None
    except UnicodeDecodeError:
        return None


def selection_scope(
    provider: str,
    model: object,
    *,
    quota_buckets: QuotaBuckets | None = None,
    environ: Mapping[str, str] | None = None,
) -> SelectionScope:
    """`model=` and `quota_bucket=` for both selection and recording; `{}` when disabled.

    The bucket comes only from explicit configuration: `quota_buckets[provider]` is one
    bucket for every model of the provider, or a mapping from member model to bucket.
    Without `quota_buckets`, inside a Flask app, `app.config["MODEL_COOLDOWN_QUOTA_BUCKETS"]`
    (malformed there: none, with one warning).
    """
    if quota_buckets is None:
        quota_buckets = checked_quota_buckets(app_setting(QUOTA_BUCKETS_CONFIG))
    elif not isinstance(quota_buckets, Mapping):
        raise TypeError("quota_buckets must be a mapping of provider to bucket or {model: bucket}")
    if not settings(environ).enabled:
        return {}
    resolved_model = model if isinstance(model, str) and model else None
    configured = (quota_buckets or {}).get(provider)
    bucket: object = None
    if isinstance(configured, str):
        bucket = configured
    elif isinstance(configured, Mapping) and resolved_model is not None:
        bucket = configured.get(resolved_model)
    return {
        "model": resolved_model,
        "quota_bucket": bucket if isinstance(bucket, str) and bucket else None,
    }


def _later(first: float | None, second: float | None) -> float | None:
    """The later of two pieces of advice, either of which may be missing."""
    if first is None or second is None:
        return second if first is None else first
    return max(first, second)


def recording_context(
    status: int | None,
    headers: Headers | None = None,
    *,
    outcome: UpstreamOutcome | None = None,
    cancelled: bool = False,
    transport_failure: str | None = None,
    received_at: float | None = None,
    environ: Mapping[str, str] | None = None,
) -> RecordingContext:
    """`outcome=`, `credential_wide_auth=` and `retry_after_seconds=` for recording.

    A 2xx whose rate-limit headers show a spent window is recorded as a throttle until the
    window lets one more request through (reason `rate_limit_exhausted`); on a 429 the advice
    is the later of a usable `Retry-After` (or Azure's `retry-after-ms`/`x-ms-retry-after-ms`),
    every spent window's and any reset given without its remaining counter. `{}` when the
    feature is disabled, so the pools keep their legacy behaviour.
    """
    if outcome is not None and not isinstance(outcome, UpstreamOutcome):
        raise TypeError("outcome must be an UpstreamOutcome or None")
    moment = wall_clock(received_at)
    if not settings(environ).enabled:
        return {}
    lowered = lowered_headers(headers)
    advice = _retry_after(lowered.get("retry-after"), moment)
    if status == 429:  # Azure's millisecond advice: the later of it and Retry-After
        advice = _later(advice, millisecond_advice(lowered))
    if outcome is None:
        if transport_failure is None and not cancelled and type(status) is int:
            outcome = classify_status(status)
        else:
            outcome = classify_upstream_outcome(
                status, transport_failure=transport_failure, cancelled=cancelled
            )
        if outcome.credential_health == "accepted":  # served, but maybe the window is spent
            window = spent_window_reset(lowered, moment) if lowered else None
            if window is not None:
                outcome = UpstreamOutcome(
                    outcome.replay_permission, "success", "throttled", SPENT_WINDOW
                )
                advice = window
    throttled = outcome.credential_health == "throttled"
    if lowered and throttled and outcome.reason != SPENT_WINDOW:
        # A 429: "retry in 2 s" while an hour-long window is spent means the later of the two;
        # a reset given without its counter is advice too (the 429 says the window is spent).
        advice = _later(advice, spent_window_reset(lowered, moment))
        advice = _later(advice, lone_reset(lowered, moment))
    return {
        "outcome": outcome,
        "credential_wide_auth": status == 401 and not cancelled,
        "retry_after_seconds": advice,
    }

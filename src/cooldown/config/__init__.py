"""MODEL_COOLDOWN_* environment settings, read at call time and never logged by value."""

from __future__ import annotations

import logging
import math
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from ..forksafe import new_lock
from ..redisurl import Secret
from .app_settings import app_setting, read_app_settings_with
from .names import (
    ACCOUNTS_ENV,
    DEFAULT_FIRST_DELAY,
    DEFAULT_LEASE_SECONDS,
    DEFAULT_MAX_SECONDS,
    DEFAULT_MAX_WAITERS,
    DEFAULT_QUOTA_SECONDS,
    DEFAULT_REDIS_PREFIX,
    DEFAULT_REDIS_TIMEOUT_MS,
    DEFAULT_USAGE_SECONDS,
    DEFAULT_WAIT_SECONDS,
    ENABLED_ENV,
    FALSE_WORDS,
    FIRST_DELAY_ENV,
    FORWARDED_ENV,
    LARGEST_MAX_SECONDS,
    LEARN_ENV,
    LEARN_MODES,
    LEASE_SECONDS_ENV,
    LIMITS_ENV,
    LONGEST_LEASE_SECONDS,
    LONGEST_REDIS_TIMEOUT_MS,
    LONGEST_WAIT_SECONDS,
    MAX_SECONDS_ENV,
    MAX_WAITERS_ENV,
    MIN_REDIS_SECRET_LENGTH,
    MOST_WAITERS,
    PREFIX_CHARACTERS,
    QUOTA_SECONDS_ENV,
    REDIS_PREFIX_ENV,
    REDIS_SECRET_ENV,
    REDIS_TIMEOUT_ENV,
    REDIS_URL_ENV,
    STATUS_MODELS_ENV,
    STATUS_TOKEN_ENV,
    TRUE_WORDS,
    USAGE_SECONDS_ENV,
    USAGE_SECONDS_RANGE,
    WAIT_SECONDS_ENV,
    LearnMode,
)
from .parsing import (
    Malformed,
    bounded_int,
    parse_enabled,
    parse_redis_prefix,
    parse_redis_secret,
    parse_redis_url_setting,
    parse_wait_seconds,
    parse_whole_number,
)

__all__ = [
    "ACCOUNTS_ENV",
    "DEFAULT_FIRST_DELAY",
    "DEFAULT_LEASE_SECONDS",
    "DEFAULT_MAX_SECONDS",
    "DEFAULT_MAX_WAITERS",
    "DEFAULT_REDIS_PREFIX",
    "DEFAULT_REDIS_TIMEOUT_MS",
    "DEFAULT_WAIT_SECONDS",
    "ENABLED_ENV",
    "FALSE_WORDS",
    "FIRST_DELAY_ENV",
    "FORWARDED_ENV",
    "LARGEST_MAX_SECONDS",
    "LEARN_ENV",
    "LEARN_MODES",
    "LEASE_SECONDS_ENV",
    "LIMITS_ENV",
    "LONGEST_LEASE_SECONDS",
    "LONGEST_REDIS_TIMEOUT_MS",
    "LONGEST_WAIT_SECONDS",
    "MAX_SECONDS_ENV",
    "MAX_WAITERS_ENV",
    "MIN_REDIS_SECRET_LENGTH",
    "MOST_WAITERS",
    "PREFIX_CHARACTERS",
    "REDIS_PREFIX_ENV",
    "REDIS_SECRET_ENV",
    "REDIS_TIMEOUT_ENV",
    "REDIS_URL_ENV",
    "STATUS_MODELS_ENV",
    "STATUS_TOKEN_ENV",
    "TRUE_WORDS",
    "USAGE_SECONDS_ENV",
    "WAIT_SECONDS_ENV",
    "CooldownSettings",
    "LearnMode",
    "app_setting",
    "apply_app_config",
    "bounded_int",
    "enabled_unset",
    "environment_value",
    "read_app_settings_with",
    "settings",
]

logger = logging.getLogger("cooldown")

_PARSED_ENV = tuple(
    name
    for name in FORWARDED_ENV
    if name not in (STATUS_TOKEN_ENV, STATUS_MODELS_ENV, ACCOUNTS_ENV, LIMITS_ENV)
)
"""What `settings()` parses; the status token and catalog are read by the status surface,
the accounts and limits by the pools."""


@dataclass(frozen=True)
class CooldownSettings:
    """The parsed settings; the defaults are what a malformed environment falls back to."""

    enabled: bool = False
    max_seconds: int = DEFAULT_MAX_SECONDS
    redis_url: str | None = field(default=None, repr=False)
    redis_secret: str | None = field(default=None, repr=False)
    redis_prefix: str = DEFAULT_REDIS_PREFIX
    redis_timeout_ms: int = DEFAULT_REDIS_TIMEOUT_MS
    learn: LearnMode = "off"
    lease_seconds: int = DEFAULT_LEASE_SECONDS
    first_delay: int = DEFAULT_FIRST_DELAY  # capped by max_seconds where it is used
    wait_seconds: float = DEFAULT_WAIT_SECONDS  # a dispatch's default wait for a key
    max_waiters: int = DEFAULT_MAX_WAITERS  # per provider per process; beyond it, 429 at once
    quota_seconds: int = DEFAULT_QUOTA_SECONDS  # a spent quota's cooldown, capped by max_seconds
    usage_seconds: int = DEFAULT_USAGE_SECONDS  # how often a usage reader reads each key


WARNED_NAMES_LIMIT = 1024
"""Distinct (variable, message) pairs remembered for log-once; beyond it, further ones are
counted in `warnings_suppressed_total`, not logged (10^6 junk names cannot grow memory)."""
_warned: set[tuple[str, str]] = set()
warnings_suppressed_total = 0
_warned_lock = new_lock(sys.modules[__name__], "_warned_lock")


def warn_once(name: str, message: str, *, level: int = logging.WARNING) -> None:
    """Log `message` (formatted with the variable's name) once per name and message."""
    global warnings_suppressed_total
    with _warned_lock:
        if (name, message) in _warned:
            return
        if len(_warned) >= WARNED_NAMES_LIMIT:
            warnings_suppressed_total += 1
            return
        _warned.add((name, message))
    logger.log(level, message, name)


def warn_sharing_off(name: str) -> None:
    """A Redis setting cannot be used: say so once; cooldowns go on, process-local."""
    warn_once(name, "%s is malformed; cooldowns stay on, but are not shared")


def warn_malformed(name: str) -> None:
    """Log once per setting name per process, naming the setting and never its value."""
    warn_once(name, "%s is malformed; model cooldown is disabled")


def environment_value(environ: Mapping[str, object], name: str) -> str | None:
    """`environ[name]`, or `None` when unset; a value that is not a string is a `TypeError`."""
    if environ is os.environ or name not in environ:
        return os.environ.get(name) if environ is os.environ else None
    value = environ[name]
    if not isinstance(value, str):
        raise TypeError(f"environment value of {name} must be a str")
    return value


@lru_cache(maxsize=64)
def _parse(raw: tuple[str | None, ...]) -> CooldownSettings:
    values = dict(zip(_PARSED_ENV, raw, strict=True))
    malformed = []
    enabled, max_seconds = False, DEFAULT_MAX_SECONDS
    try:
        enabled = parse_enabled(values[ENABLED_ENV])
    except Malformed as error:
        malformed.append(error.name)
    try:
        max_seconds = parse_whole_number(
            values[MAX_SECONDS_ENV], MAX_SECONDS_ENV, DEFAULT_MAX_SECONDS, LARGEST_MAX_SECONDS
        )
    except Malformed as error:
        malformed.append(error.name)
    for name in malformed:
        warn_malformed(name)
    if malformed:
        return CooldownSettings()
    return CooldownSettings(
        enabled=enabled,
        max_seconds=max_seconds,
        learn=_parse_learn(values[LEARN_ENV]),
        lease_seconds=_parse_default_on_error(
            values[LEASE_SECONDS_ENV],
            LEASE_SECONDS_ENV,
            DEFAULT_LEASE_SECONDS,
            LONGEST_LEASE_SECONDS,
        ),
        first_delay=_parse_default_on_error(
            values[FIRST_DELAY_ENV], FIRST_DELAY_ENV, DEFAULT_FIRST_DELAY, LARGEST_MAX_SECONDS
        ),
        quota_seconds=_parse_default_on_error(
            values[QUOTA_SECONDS_ENV], QUOTA_SECONDS_ENV, DEFAULT_QUOTA_SECONDS, LARGEST_MAX_SECONDS
        ),
        usage_seconds=_parse_default_on_error(
            values[USAGE_SECONDS_ENV],
            USAGE_SECONDS_ENV,
            DEFAULT_USAGE_SECONDS,
            *USAGE_SECONDS_RANGE,
        ),
        **_waiting(values),
        **_sharing(values),
    )


def _waiting(values: Mapping[str, str | None]) -> dict[str, Any]:
    """The waiting settings; a malformed one is its default, with one warning."""
    waiting: dict[str, Any] = {}
    try:
        waiting["wait_seconds"] = parse_wait_seconds(values[WAIT_SECONDS_ENV], DEFAULT_WAIT_SECONDS)
    except Malformed:
        warn_once(WAIT_SECONDS_ENV, "%s is malformed; its default is used")
    raw = (values[MAX_WAITERS_ENV] or "").strip()
    if raw:
        most = bounded_int(raw, 0, MOST_WAITERS)
        if most is None:
            warn_once(MAX_WAITERS_ENV, "%s is malformed; its default is used")
        else:
            waiting["max_waiters"] = most
    return waiting


def _parse_learn(raw: str | None) -> LearnMode:
    value = (raw or "").strip().lower() or "off"
    for mode in LEARN_MODES:
        if value == mode:
            return mode
    warn_once(LEARN_ENV, "%s is malformed; windows are not learned")
    return "off"


def _parse_default_on_error(
    raw: str | None, name: str, default: int, low_or_high: int, high: int | None = None
) -> int:
    """A whole-number setting, from 1 (or `low_or_high` when `high` is given) through its
    highest: malformed is its default with one warning, and the feature stays on."""
    low, high = (1, low_or_high) if high is None else (low_or_high, high)
    try:
        return parse_whole_number(raw, name, default, high, low=low)
    except Malformed:
        warn_once(name, "%s is malformed; its default is used")
        return default


def _sharing(values: Mapping[str, str | None]) -> dict[str, Any]:
    """The Redis settings; a malformed one turns sharing off and leaves cooldowns on."""
    if not (values[REDIS_URL_ENV] or "").strip():
        return {}
    try:
        url = parse_redis_url_setting(values[REDIS_URL_ENV])
        secret = parse_redis_secret(values[REDIS_SECRET_ENV], required=True)
        return {
            "redis_url": None if url is None else Secret(url),
            "redis_secret": None if secret is None else Secret(secret),
            "redis_prefix": parse_redis_prefix(values[REDIS_PREFIX_ENV]),
            "redis_timeout_ms": parse_whole_number(
                values[REDIS_TIMEOUT_ENV],
                REDIS_TIMEOUT_ENV,
                DEFAULT_REDIS_TIMEOUT_MS,
                LONGEST_REDIS_TIMEOUT_MS,
            ),
        }
    except Malformed as error:
        warn_sharing_off(error.name)
        return {}


def _process_environment() -> tuple[str | None, ...]:
    """This package's variables in `os.environ`, read on every call, as cheaply as possible.

    `os.environ.get` encodes the name and raises and catches `KeyError` for every unset
    variable (about a microsecond each); CPython's `os.environ` keeps its encoded data in
    `_data`, which is read directly when it is there (values decoded only on a cache miss).
    """
    environ = os.environ
    data = getattr(environ, "_data", None)
    if not isinstance(data, dict) or _ENCODED_NAMES is None:
        return tuple(map(environ.get, _PARSED_ENV))
    return _decoded(tuple(map(data.get, _ENCODED_NAMES)))


_encode = getattr(os.environ, "encodekey", None)
_ENCODED_NAMES = None if _encode is None else tuple(map(_encode, _PARSED_ENV))


@lru_cache(maxsize=64)
def _decoded(raw: tuple[Any, ...]) -> tuple[str | None, ...]:
    decode = os.environ.decodevalue
    return tuple(None if value is None else decode(value) for value in raw)


_MALFORMED_APP_VALUE = "\x00 malformed app.config value"
"""What an `app.config` value of the wrong type stands for: every parser refuses it."""
_app_overrides: tuple[str | None, ...] = (None,) * len(_PARSED_ENV)
"""The process settings `init_app` read from `app.config`, by `_PARSED_ENV` position."""
_overrides_lock = new_lock(sys.modules[__name__], "_overrides_lock")


def _as_setting(value: object) -> str:
    """An `app.config` value in the environment's terms: booleans and ints as such."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) and value.bit_length() <= 64:  # str() of 4300+ digits raises
        return str(value)
    if isinstance(value, float) and math.isfinite(value):  # MODEL_COOLDOWN_WAIT_SECONDS
        return f"{value:.6f}"
    if isinstance(value, str):
        return value
    return _MALFORMED_APP_VALUE


def apply_app_config(config: Mapping[str, object]) -> None:
    """Let `app.config`'s MODEL_COOLDOWN_* process settings override the environment.

    A name a later call sets to another value warns once (naming it) and the later value
    stands; a name it does not set keeps the earlier override.
    """
    global _app_overrides
    with _overrides_lock:
        merged = list(_app_overrides)
        for position, name in enumerate(_PARSED_ENV):
            if name not in config or config[name] is None:
                continue
            value = _as_setting(config[name])
            if merged[position] not in (None, value):
                warn_once(name, "%s differs between init_app calls; the later value stands")
            merged[position] = value
        _app_overrides = tuple(merged)


def enabled_unset() -> bool:
    """`MODEL_COOLDOWN_ENABLED` is set nowhere (neither `app.config` nor the environment):
    off by default rather than by choice."""
    override = _app_overrides[_PARSED_ENV.index(ENABLED_ENV)]
    raw = os.environ.get(ENABLED_ENV) if override is None else override
    return raw is None or not raw.strip()


def forget_app_config() -> None:
    """Back to the environment alone (tests)."""
    global _app_overrides
    _app_overrides = (None,) * len(_PARSED_ENV)


def _with_overrides(
    values: tuple[str | None, ...], overrides: tuple[str | None, ...]
) -> tuple[str | None, ...]:
    return tuple(v if o is None else o for v, o in zip(values, overrides, strict=True))


_last_read: list[Any] = [None, None, CooldownSettings()]  # raw values, overrides, their parse


def settings(environ: Mapping[str, str] | None = None) -> CooldownSettings:
    """Read the settings now, so a changed environment applies to the next call.

    With no `environ`, what `init_app` read from `app.config` overrides the environment.
    """
    if environ is None:  # the hot path: os.environ holds only strings
        data = getattr(os.environ, "_data", None)
        if not isinstance(data, dict) or _ENCODED_NAMES is None:
            return _parse(_with_overrides(_process_environment(), _app_overrides))
        raw = tuple(map(data.get, _ENCODED_NAMES))
        last_raw, last_overrides, last = _last_read
        if raw == last_raw and _app_overrides is last_overrides:  # nothing changed
            return last  # type: ignore[no-any-return]
        overrides = _app_overrides
        current = _parse(_with_overrides(_decoded(raw), overrides))
        _last_read[:] = [raw, overrides, current]
        return current
    if not isinstance(environ, Mapping):
        raise TypeError("environ must be a mapping of str to str")
    return _parse(tuple(environment_value(environ, name) for name in _PARSED_ENV))

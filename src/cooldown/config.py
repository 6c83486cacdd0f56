"""MODEL_COOLDOWN_* environment settings, read at call time and never logged by value."""

from __future__ import annotations

import importlib.util
import logging
import os
import string
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TypeVar
from urllib.parse import urlsplit

__all__ = ["FORWARDED_ENV", "CooldownSettings", "settings"]

logger = logging.getLogger("cooldown")

ENABLED_ENV = "MODEL_COOLDOWN_ENABLED"
MAX_SECONDS_ENV = "MODEL_COOLDOWN_MAX_SECONDS"
REDIS_URL_ENV = "MODEL_COOLDOWN_REDIS_URL"
REDIS_SECRET_ENV = "MODEL_COOLDOWN_REDIS_SECRET"
REDIS_PREFIX_ENV = "MODEL_COOLDOWN_REDIS_PREFIX"

FORWARDED_ENV: tuple[str, ...] = (
    ENABLED_ENV,
    MAX_SECONDS_ENV,
    REDIS_URL_ENV,
    REDIS_SECRET_ENV,
    REDIS_PREFIX_ENV,
)
"""The settings a container environment allowlist must forward for the feature to work."""

DEFAULT_MAX_SECONDS = 3600
LARGEST_MAX_SECONDS = 2_147_483_647
DEFAULT_REDIS_PREFIX = "model-cooldown"
MIN_REDIS_SECRET_LENGTH = 32

_T = TypeVar("_T")

_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})
_PREFIX_CHARACTERS = frozenset(string.ascii_letters + string.digits + ":_.-")


@dataclass(frozen=True)
class CooldownSettings:
    """The parsed settings; the defaults are what a malformed environment falls back to."""

    enabled: bool = False
    max_seconds: int = DEFAULT_MAX_SECONDS
    redis_url: str | None = field(default=None, repr=False)
    redis_secret: str | None = field(default=None, repr=False)
    redis_prefix: str = DEFAULT_REDIS_PREFIX


class _Malformed(ValueError):
    """Internal signal: the named setting cannot be used."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


_warned: set[str] = set()
_warned_lock = threading.Lock()


def warn_malformed(name: str) -> None:
    """Log once per setting name per process, naming the setting and never its value."""
    with _warned_lock:
        if name in _warned:
            return
        _warned.add(name)
    logger.warning("%s is malformed; model cooldown is disabled", name)


def _parse_enabled(raw: str | None) -> bool:
    value = (raw or "").strip().lower()
    if not value or value in _FALSE:
        return False
    if value in _TRUE:
        return True
    raise _Malformed(ENABLED_ENV)


def _parse_max_seconds(raw: str | None) -> int:
    value = (raw or "").strip()
    if not value:
        return DEFAULT_MAX_SECONDS
    if value.isascii() and value.isdigit() and 1 <= int(value) <= LARGEST_MAX_SECONDS:
        return int(value)
    raise _Malformed(MAX_SECONDS_ENV)


def _parse_redis_url(raw: str | None) -> str | None:
    value = (raw or "").strip()
    if not value:
        return None
    try:
        parts = urlsplit(value)
        usable = parts.scheme in ("redis", "rediss") and bool(parts.hostname)
        parts.port  # noqa: B018 - raises ValueError for a malformed port
    except ValueError:
        usable = False
    if not usable or importlib.util.find_spec("redis") is None:
        raise _Malformed(REDIS_URL_ENV)
    return value


def _parse_redis_secret(raw: str | None, *, required: bool) -> str | None:
    value = (raw or "").strip()
    if not required:
        return None
    if len(value) < MIN_REDIS_SECRET_LENGTH:
        raise _Malformed(REDIS_SECRET_ENV)
    return value


def _parse_redis_prefix(raw: str | None) -> str:
    value = (raw or "").strip()
    if not value:
        return DEFAULT_REDIS_PREFIX
    if len(value) > 100 or not set(value) <= _PREFIX_CHARACTERS:
        raise _Malformed(REDIS_PREFIX_ENV)
    return value


@lru_cache(maxsize=64)
def _parse(
    enabled: str | None,
    max_seconds: str | None,
    redis_url: str | None,
    redis_secret: str | None,
    redis_prefix: str | None,
) -> CooldownSettings:
    malformed: list[str] = []

    def checked(parse: Callable[[], _T], default: _T) -> _T:
        try:
            return parse()
        except _Malformed as error:
            malformed.append(error.name)
            return default

    url = checked(lambda: _parse_redis_url(redis_url), None)
    url_given = bool((redis_url or "").strip())
    parsed = CooldownSettings(
        enabled=checked(lambda: _parse_enabled(enabled), False),
        max_seconds=checked(lambda: _parse_max_seconds(max_seconds), DEFAULT_MAX_SECONDS),
        redis_url=url,
        redis_secret=checked(lambda: _parse_redis_secret(redis_secret, required=url_given), None),
        redis_prefix=checked(lambda: _parse_redis_prefix(redis_prefix), DEFAULT_REDIS_PREFIX),
    )
    for name in malformed:
        warn_malformed(name)
    return CooldownSettings() if malformed else parsed


def settings(environ: Mapping[str, str] | None = None) -> CooldownSettings:
    """Read the settings now, so a changed environment applies to the next call."""
    env = os.environ if environ is None else environ
    get = env.get
    return _parse(
        get(ENABLED_ENV),
        get(MAX_SECONDS_ENV),
        get(REDIS_URL_ENV),
        get(REDIS_SECRET_ENV),
        get(REDIS_PREFIX_ENV),
    )

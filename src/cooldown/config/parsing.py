"""Parsers for one setting each: a usable value, or `Malformed` naming the setting."""

from __future__ import annotations

import importlib.util

from ..redisurl import parse_redis_url
from .names import (
    DEFAULT_REDIS_PREFIX,
    ENABLED_ENV,
    FALSE_WORDS,
    LONGEST_WAIT_SECONDS,
    MIN_REDIS_SECRET_LENGTH,
    PREFIX_CHARACTERS,
    REDIS_PREFIX_ENV,
    REDIS_SECRET_ENV,
    REDIS_URL_ENV,
    TRUE_WORDS,
    WAIT_SECONDS_ENV,
)

__all__ = [
    "Malformed",
    "bounded_int",
    "parse_enabled",
    "parse_redis_prefix",
    "parse_redis_secret",
    "parse_redis_url_setting",
    "parse_wait_seconds",
    "parse_whole_number",
]


class Malformed(ValueError):
    """Internal signal: the named setting cannot be used."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def parse_enabled(raw: str | None) -> bool:
    value = (raw or "").strip().lower()
    if not value or value in FALSE_WORDS:
        return False
    if value in TRUE_WORDS:
        return True
    raise Malformed(ENABLED_ENV)


def bounded_int(text: str, low: int, high: int) -> int | None:
    """ASCII digits within [low, high]; anything else (even 5000 digits) is None, never raised."""
    digits = text.strip()
    if not (digits.isascii() and digits.isdigit()):
        return None
    significant = digits.lstrip("0") or "0"
    if len(significant) > len(str(high)):  # too long to be in range: no int() on it at all
        return None
    value = int(significant)
    return value if low <= value <= high else None


def parse_whole_number(raw: str | None, name: str, default: int, high: int, *, low: int = 1) -> int:
    """Unset or blank is `default`; otherwise ASCII digits from `low` through `high`."""
    value = (raw or "").strip()
    if not value:
        return default
    parsed = bounded_int(value, low, high)
    if parsed is None:
        raise Malformed(name)
    return parsed


def parse_redis_url_setting(raw: str | None) -> str | None:
    value = (raw or "").strip()
    if not value:
        return None
    try:
        parse_redis_url(value)
    except ValueError:
        raise Malformed(REDIS_URL_ENV) from None
    if importlib.util.find_spec("redis") is None:
        raise Malformed(REDIS_URL_ENV)
    return value


def parse_redis_secret(raw: str | None, *, required: bool) -> str | None:
    value = (raw or "").strip()
    if not required:
        return None
    if len(value) < MIN_REDIS_SECRET_LENGTH:
        raise Malformed(REDIS_SECRET_ENV)
    try:
        value.encode("utf-8")  # bytes that were not UTF-8 arrive as lone surrogates
    except UnicodeEncodeError:
        raise Malformed(REDIS_SECRET_ENV) from None
    return value


def parse_redis_prefix(raw: str | None) -> str:
    value = (raw or "").strip()
    if not value:
        return DEFAULT_REDIS_PREFIX
    if len(value) > 100 or not set(value) <= PREFIX_CHARACTERS:
        raise Malformed(REDIS_PREFIX_ENV)
    return value


def parse_wait_seconds(raw: str | None, default: float) -> float:
    """Seconds a dispatch may wait for a key: a plain decimal from 0 to 60."""
    value = (raw or "").strip()
    if not value:
        return default
    whole, _, fraction = value.partition(".")
    if not (value.isascii() and whole.isdigit() and (not fraction or fraction.isdigit())):
        raise Malformed(WAIT_SECONDS_ENV)
    if len(whole) > 2 or len(fraction) > 6 or float(value) > LONGEST_WAIT_SECONDS:
        raise Malformed(WAIT_SECONDS_ENV)
    return float(value)

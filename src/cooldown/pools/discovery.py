"""Keys from environment variables, parsed again only when the variables they came from change.

Rule: a call parses `os.environ` again when the number of variables changed (a numbered
variable was added or removed), when any variable it read last time has a different value,
or when its last parse is a second old; otherwise it reuses that parse. A supplied
`environ` mapping is parsed on every call.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Callable, Mapping
from typing import NamedTuple

from ..config import bounded_int, environment_value, warn_once
from ._common import (
    configured_positions,
    key_value,
    numbered_suffix,
    unique_stripped,
    without_placeholders,
)

__all__ = [
    "RESCAN_SECONDS",
    "configured_nanogpt_keys",
    "discover",
    "discovered_positions",
    "numbered_keys",
]

RESCAN_SECONDS = 1.0
"""The longest a parse is reused: bounds what no cheap check catches (a variable added
in the same moment as an unrelated one is removed)."""

Scan = Callable[[Mapping[str, object]], tuple[list[str], list[str], dict[str, int]]]
"""environ -> (the names it read, the keys it found, each key's place as configured)."""

_DIRECT_ENV = ("NANOGPT_API_KEY", "NANO_GPT_KEY")
_LIST_ENV = ("NANOGPT_API_KEYS", "NANO_GPT_KEYS")
_NUMBERED_PREFIXES = ("NANOGPT_API_KEY_", "NANO_GPT_KEY_")
_PREFERRED_INDEX_ENV = "NANOGPT_PREFERRED_KEY_INDEX"


class _Parse(NamedTuple):
    size: int  # variables in the environment then
    names: tuple[object, ...]  # the names read, encoded as os.environ stores them
    raw: tuple[object, ...]  # their stored values (None when unset)
    keys: tuple[str, ...]
    positions: dict[str, int]
    at: float


_parses: dict[str, _Parse] = {}
_encode = getattr(os.environ, "encodekey", None)


def discover(token: str, scan: Scan, environ: Mapping[str, object] | None) -> list[str]:
    """`scan(environ)`'s keys; for the process environment, the last parse while it holds."""
    return list(_discovered(token, scan, environ).keys)


def discovered_positions(
    token: str, scan: Scan, environ: Mapping[str, object] | None
) -> dict[str, int]:
    """Each discovered key's place in the list as configured (see `configured_positions`)."""
    return dict(_discovered(token, scan, environ).positions)


def _discovered(token: str, scan: Scan, environ: Mapping[str, object] | None) -> _Parse:
    data = getattr(os.environ, "_data", None)
    if environ is not None and environ is not os.environ:
        if not isinstance(environ, Mapping) or not all(isinstance(name, str) for name in environ):
            raise TypeError("environ must be a mapping of str to str")
        _, keys, positions = scan(environ)
        return _Parse(0, (), (), tuple(keys), positions, 0.0)
    if not isinstance(data, dict):
        _, keys, positions = scan(os.environ)
        return _Parse(0, (), (), tuple(keys), positions, 0.0)
    assert _encode is not None  # os.environ has both or neither
    now = time.monotonic()
    last = _parses.get(token)
    if (
        last is not None
        and last.size == len(data)
        and now - last.at < RESCAN_SECONDS
        and tuple(map(data.get, last.names)) == last.raw
    ):
        return last
    size = len(data)
    names, keys, positions = scan(os.environ)
    encoded = tuple(map(_encode, names))
    parse = _Parse(size, encoded, tuple(map(data.get, encoded)), tuple(keys), positions, now)
    _parses[token] = parse
    return parse


def numbered_keys(base: str) -> Scan:
    """`BASE`, then `BASE_<n>` by ascending n: the order operators number their keys in."""
    marker = base + "_"

    def scan(environ: Mapping[str, object]) -> tuple[list[str], list[str], dict[str, int]]:
        # Names first, values only for matches: reading every value would decode the whole env.
        numbered = sorted(
            (number, name)
            for name in environ
            if name.startswith(marker) and (number := numbered_suffix(name, marker)) is not None
        )
        names = [base, *(name for _, name in numbered)]
        configured = [environment_value(environ, name) for name in names]
        keys = unique_stripped([key_value(environ, name) for name in names])
        return names, keys, configured_positions(configured)

    return scan


def _list_values(raw: str, name: str) -> list[str]:
    """A JSON array of strings, or comma/newline separated values."""
    text = raw.strip()
    if text.startswith("["):
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        except RecursionError:  # nested deeper than the parser goes: not a list of keys
            warn_once(name, "%s is malformed (nested too deeply); it is skipped")
            return []
        if isinstance(parsed, list):
            return [item for item in parsed if isinstance(item, str)]
    return re.split(r"[,\n]", text)


def _nanogpt_keys(
    environ: Mapping[str, object],
) -> tuple[list[str], list[str], dict[str, int]]:
    indexed: list[tuple[int | None, str]] = [(0, key_value(environ, name)) for name in _DIRECT_ENV]
    for name in _LIST_ENV:
        listed = _list_values(environment_value(environ, name) or "", name)
        indexed.extend((None, value) for value in without_placeholders(listed, name))
    numbered = sorted(  # by number, the first prefix first on ties
        (number, rank, name)
        for rank, prefix in enumerate(_NUMBERED_PREFIXES)
        for name in environ
        if name.startswith(prefix) and (number := numbered_suffix(name, prefix)) is not None
    )
    indexed.extend((number, key_value(environ, name)) for number, _, name in numbered)
    raw_index = environment_value(environ, _PREFERRED_INDEX_ENV) or ""
    preferred = bounded_int(raw_index, 0, sys.maxsize)
    if preferred is not None:
        indexed.sort(key=lambda item: item[0] != preferred)  # stable: order kept otherwise
    names = [*_DIRECT_ENV, *_LIST_ENV, *(name for _, _, name in numbered), _PREFERRED_INDEX_ENV]
    values = [value for _, value in indexed]
    return names, unique_stripped(values), configured_positions(values)


def configured_nanogpt_keys(environ: Mapping[str, str] | None = None) -> list[str]:
    """Discover NanoGPT keys: direct, then lists, then numbered; preferred index first."""
    return discover("nanogpt", _nanogpt_keys, environ)

"""Settings that hold JSON per provider (`MODEL_COOLDOWN_ACCOUNTS`, `MODEL_COOLDOWN_LIMITS`):
`app.config` (a mapping, or its JSON) over the environment, parsed once per value; a
malformed one counts as unset, with one warning that names the setting, never its value."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Generic, TypeVar

from ..config import warn_once

__all__ = ["ProviderSetting"]

_Value = TypeVar("_Value")

_MALFORMED = "\x00 malformed"  # what an app.config value JSON cannot hold stands for


class ProviderSetting(Generic[_Value]):
    """`{provider: value}` in one setting, each value checked by `check(provider, value)`
    (raising `TypeError` or `ValueError` on anything it refuses)."""

    def __init__(self, name: str, check: Callable[[str, object], _Value], malformed: str) -> None:
        self._name = name
        self._malformed = malformed
        self._app: str | None = None
        self._parsed = lru_cache(maxsize=16)(self._parse)
        self._check = check
        encode = getattr(os.environ, "encodekey", None)
        self._encoded = None if encode is None else encode(name)

    def apply_app(self, config: Mapping[str, object]) -> None:
        """`init_app`: the app's value (a mapping, or its JSON) overrides the variable."""
        value = config.get(self._name)
        if value is None:
            return
        try:
            self._app = value if isinstance(value, str) else json.dumps(value)
        except (TypeError, ValueError, RecursionError):  # not JSON-able (or nested too deeply):
            self._app = _MALFORMED  # malformed, as junk in the variable is

    def forget_app(self) -> None:
        """Back to the environment alone (tests)."""
        self._app = None

    def get(self, provider: str) -> _Value | None:
        """This provider's value, or `None` (unset, absent or malformed). Read on every
        dispatch: the environment's own bytes are looked up (no encoding, no `KeyError`),
        and parsed once per value."""
        raw: str | bytes | None = self._app
        if raw is None:
            data = getattr(os.environ, "_data", None)
            if isinstance(data, dict) and self._encoded is not None:
                raw = data.get(self._encoded)
            else:
                raw = os.environ.get(self._name)
        if not raw:
            return None
        return self._parsed(raw).get(provider)

    def _parse(self, raw: str | bytes) -> dict[str, _Value]:
        if isinstance(raw, bytes):
            raw = os.fsdecode(raw)
        if not raw.strip():
            return {}
        try:
            document = json.loads(raw)
            if not isinstance(document, dict):
                raise TypeError
            return {provider: self._check(provider, value) for provider, value in document.items()}
        except (ValueError, TypeError, RecursionError):
            warn_once(self._name, self._malformed)
            return {}

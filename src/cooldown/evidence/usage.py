"""What a provider's usage API says of one key: credit left, its limit, when it resets.

A usage reader (`register(provider, ..., usage=reader)`) returns a `Usage` for a key, or
`None` when it knows nothing; the pool reads each key off the request path and steers by it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Usage", "UsageReader", "checked_reader"]


@dataclass(frozen=True)
class Usage:
    """One key's reading: `remaining` credit (or requests) and its `limit` (`None`: not
    known, or unlimited), `resets_in` seconds until the provider resets it, and `spent`
    when the provider says the key can spend nothing more. `spent=True` or `remaining == 0`
    cools the key for every model; a later reading with `remaining > 0` lifts that."""

    remaining: float | None = None
    limit: float | None = None
    resets_in: float | None = None
    spent: bool = False

    def __post_init__(self) -> None:
        for name in ("remaining", "limit", "resets_in"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"Usage.{name} must be a number or None")
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"Usage.{name} must be finite and 0 or more")
        if not isinstance(self.spent, bool):
            raise TypeError("Usage.spent must be a bool")

    @property
    def out(self) -> bool:
        """Does this reading say the key can spend nothing more?"""
        return self.spent or self.remaining == 0


UsageReader = Callable[[str], "Usage | None"]
"""`reader(key)`: the key's `Usage`, or `None` when nothing is known."""


def checked_reader(reader: object) -> UsageReader | None:
    if reader is not None and not callable(reader):
        raise TypeError("usage must be a callable reader(key) returning a Usage or None")
    return reader

"""Observations shared between processes through Redis; the only layer that talks to Redis.

It implements the store's `SharedObservations` protocol (`store/backend.py`), so the arrow
runs from here to the store and never back.
"""

from __future__ import annotations

from .attaching import share_when_configured
from .observations import RedisObservations

__all__ = ["RedisObservations", "share_when_configured"]

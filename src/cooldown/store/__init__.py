"""The local policy over the deadline table and the mechanisms it stands on.

Layers above import the store from here; the modules inside are its own business.
"""

from __future__ import annotations

from .policy import (
    MAX_ENTRIES,
    ORDERS,
    SCOPES_PER_CREDENTIAL,
    Attempt,
    ModelCooldown,
    Order,
    model_cooldown,
)
from .scope import CallScope
from .selection import Reason

__all__ = [
    "MAX_ENTRIES",
    "ORDERS",
    "SCOPES_PER_CREDENTIAL",
    "Attempt",
    "CallScope",
    "ModelCooldown",
    "Order",
    "Reason",
    "model_cooldown",
]

"""A runnable example gateway: `python -m cooldown.demo --help`."""

from __future__ import annotations

from .gateway import DemoConfig, create_app
from .upstream import SimulatedUpstream, create_upstream_app

__all__ = ["DemoConfig", "SimulatedUpstream", "create_app", "create_upstream_app"]

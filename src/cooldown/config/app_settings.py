"""Per-app settings that are not strings (a mapping, say), read per call from the current
app: `cooldown.web` installs Flask's reader, so nothing below the web layer imports a
framework."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["app_setting", "read_app_settings_with"]

_app_setting: list[Callable[[str], object]] = [lambda name: None]
"""How a setting of the current app is read; `cooldown.web` installs Flask's (`app.config`
inside an app context), so nothing below the web layer imports a framework."""


def read_app_settings_with(reader: Callable[[str], object]) -> None:
    """`cooldown.web`: read per-app settings (`MODEL_COOLDOWN_QUOTA_BUCKETS`) with `reader`."""
    _app_setting[0] = reader


def app_setting(name: str) -> object:
    """A setting of the current app that is not a string (a mapping, say), read per call:
    `None` outside an app, or where no reader is installed."""
    return _app_setting[0](name)

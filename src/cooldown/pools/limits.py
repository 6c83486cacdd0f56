"""Limits a provider documents, declared for its keys: `register(limits=..., day_zone=...)`,
or `MODEL_COOLDOWN_LIMITS` (JSON `{provider: limits}`) for a provider registered without."""

from __future__ import annotations

from datetime import tzinfo

from ..config import LIMITS_ENV
from ..store.declared import DeclaredLimits, declared_limits
from .provider_settings import ProviderSetting

__all__ = ["apply_app_limits", "forget_app_limits", "limits_from_environment"]


def _checked(provider: str, limits: object) -> DeclaredLimits | None:
    return declared_limits(limits)


_setting = ProviderSetting(LIMITS_ENV, _checked, "%s is malformed; it declares no limit")

apply_app_limits = _setting.apply_app
forget_app_limits = _setting.forget_app


def limits_from_environment(provider: str, zone: tzinfo | None) -> DeclaredLimits | None:
    """This provider's limits in `MODEL_COOLDOWN_LIMITS` (`app.config` over the environment),
    its day ending as the registered `day_zone` says (`None`: 24 rolling hours); malformed:
    none, with one warning."""
    found = _setting.get(provider)
    return None if found is None else found._replace(zone=zone)

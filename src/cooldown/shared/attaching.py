"""Which Redis a store shares its observations through: the one the settings name, attached
once per change of the settings, each store with a client of its own."""

from __future__ import annotations

import sys
import weakref

from ..config import REDIS_URL_ENV, CooldownSettings, warn_sharing_off
from ..forksafe import new_lock
from ..store import ModelCooldown
from ..store.backend import SharedObservations
from .observations import RedisObservations

__all__ = ["share_when_configured"]

_Wanted = tuple[str, str, str, int]  # url, secret, prefix, timeout in milliseconds


class _Attachment:
    """What the settings last attached to one store, and the settings it came from."""

    __slots__ = ("backend", "seen", "wanted")

    def __init__(self) -> None:
        self.seen: CooldownSettings | None = None  # settings are cached: identity is cheap
        self.wanted: _Wanted | None = None
        self.backend: SharedObservations | None = None


_attachments: weakref.WeakKeyDictionary[ModelCooldown, _Attachment] = weakref.WeakKeyDictionary()
_attach_lock = new_lock(sys.modules[__name__], "_attach_lock")


def share_when_configured(store: ModelCooldown, current: CooldownSettings) -> None:
    """Attach `store` to the Redis the settings name, or detach it when they name none.

    Called by the pools on every scoped call; a no-op unless the settings changed. Each
    store gets its own client; a store attached by hand (`attach_shared`) is left alone.
    """
    attachment = _attachments.get(store)
    if attachment is not None and current is attachment.seen:
        return
    wanted = None
    if current.redis_url and current.redis_secret:
        wanted = (
            current.redis_url,
            current.redis_secret,
            current.redis_prefix,
            current.redis_timeout_ms,
        )
    attached = None
    with _attach_lock:
        attachment = _attachments.setdefault(store, _Attachment())
        if wanted != attachment.wanted and store.shared is attachment.backend:
            attached = _attach(store, attachment, wanted)
        attachment.seen = current
    if attached is not None and wanted is not None:  # Redis I/O: after the lock is released
        attached.check_secret(wanted[1].encode())


def _attach(
    store: ModelCooldown, attachment: _Attachment, wanted: _Wanted | None
) -> RedisObservations | None:
    """Attach `store` to the wanted Redis (or none); the backend attached, if any."""
    previous = store.detach_shared()
    if isinstance(previous, RedisObservations):
        previous.close()
    attachment.wanted, attachment.backend = wanted, None
    if wanted is None:
        return None
    url, secret, prefix, timeout_ms = wanted
    try:
        backend = RedisObservations(url, prefix=prefix, socket_timeout=timeout_ms / 1000)
    except ValueError:  # settings validated it; this only guards a direct caller's URL
        warn_sharing_off(REDIS_URL_ENV)
        return None
    store.attach_shared(backend, secret=secret.encode())
    attachment.backend = backend
    return backend

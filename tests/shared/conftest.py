"""Two stores attached to one Redis under one secret and prefix stand for two processes."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from cooldown import ModelCooldown

SHARED_SECRET = "attempts-secret-" + "q" * 40


@pytest.fixture
def process(redis_url: str, prefix: str) -> Iterator[Callable[[], ModelCooldown]]:
    """A new store attached to the test's Redis and prefix: one more gateway process."""
    from cooldown.shared.observations import RedisObservations  # needs the [redis] extra

    stores: list[ModelCooldown] = []

    def start() -> ModelCooldown:
        store = ModelCooldown()
        backend = RedisObservations(redis_url, prefix=prefix)
        store.attach_shared(backend, secret=SHARED_SECRET.encode())
        stores.append(store)
        return store

    yield start
    for store in stores:
        backend = store.detach_shared()
        assert isinstance(backend, RedisObservations)
        backend.close()

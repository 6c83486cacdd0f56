"""Fixtures shared by the suite: a clean environment and clean process-wide state per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cooldown import (
    FORWARDED_ENV,
    CredentialPool,
    ModelCooldown,
    NanoGPTKeyPool,
    NanoGPTUnifiedKeyPool,
    config,
    model_cooldown,
)


@pytest.fixture(autouse=True)
def clean_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No MODEL_COOLDOWN_* from the caller's shell, and no state left by another test."""
    for name in FORWARDED_ENV:
        monkeypatch.delenv(name, raising=False)
    model_cooldown.reset()
    CredentialPool.reset()
    NanoGPTKeyPool.reset()
    NanoGPTUnifiedKeyPool.reset()
    yield
    model_cooldown.reset()
    CredentialPool.reset()
    NanoGPTKeyPool.reset()
    NanoGPTUnifiedKeyPool.reset()


@pytest.fixture
def fresh_warnings() -> Iterator[None]:
    """Forget which settings already warned, so log-once can be observed again."""
    config._warned.clear()
    config._parse.cache_clear()
    yield
    config._warned.clear()
    config._parse.cache_clear()


@pytest.fixture
def enabled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODEL_COOLDOWN_ENABLED", "true")


@pytest.fixture
def store() -> ModelCooldown:
    return ModelCooldown()

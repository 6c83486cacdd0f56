"""Fixtures shared by the suite: a clean environment and clean process-wide state per test."""

from __future__ import annotations

import os
import select
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

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
from cooldown.learn import window_learner


@pytest.fixture(autouse=True)
def clean_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No MODEL_COOLDOWN_* from the caller's shell, and no state left by another test."""
    for name in FORWARDED_ENV:
        monkeypatch.delenv(name, raising=False)
    forget_everything()
    yield
    forget_everything()


def forget_everything() -> None:
    model_cooldown.reset()
    window_learner.reset()
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


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., str]]:
    """Start `python -m <module> --port 0 ...` and return the URL it prints; stop it after."""
    started: list[subprocess.Popen[str]] = []
    logs: list[IO[str]] = []

    def start(module: str, *args: str, env: dict[str, str] | None = None) -> str:
        environment = {k: v for k, v in os.environ.items() if not k.startswith("MODEL_COOLDOWN")}
        environment.update(env or {})
        log = open(tmp_path / f"{module}-{len(started)}.stderr", "w")  # noqa: SIM115
        logs.append(log)
        process = subprocess.Popen(
            [sys.executable, "-m", module, "--port", "0", *args],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env=environment,
        )
        started.append(process)
        assert process.stdout is not None
        ready, _, _ = select.select([process.stdout], [], [], 20)
        line = process.stdout.readline() if ready else ""
        if not line.startswith("Serving on "):
            process.kill()
            raise RuntimeError(f"{module} did not start: {line!r}")
        return line.split()[-1]

    yield start
    for process in started:
        process.terminate()
        process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()
    for log in logs:
        log.close()

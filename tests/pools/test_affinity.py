"""Prompt-cache affinity: rendezvous hashing over the free keys, no shared state."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import pytest

from cooldown import CredentialPool

P = "ce-gpt-pro"
BASE = "CODEX_EVERYWHERE_API_KEY_GPT_PRO_POOL"
KEYS = ["sk-a", "sk-b", "sk-c", "sk-d"]
IDS = [f"conversation-{index}" for index in range(1000)]


@pytest.fixture
def four_keys(enabled: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BASE, KEYS[0])
    for number, key in enumerate(KEYS[1:], start=1):
        monkeypatch.setenv(f"{BASE}_{number}", key)


def chosen(now: float = 0) -> dict[str, str | None]:
    return {i: CredentialPool.select(P, model="m", affinity=i, now=now) for i in IDS}


def test_the_same_conversation_lands_on_the_same_key(four_keys: None) -> None:
    assert chosen() == chosen()


def test_conversations_spread_evenly(four_keys: None) -> None:
    counts = Counter(chosen().values())
    assert set(counts) == set(KEYS)
    assert all(175 <= count <= 325 for count in counts.values())  # within 30% of 250


def test_only_the_cooling_keys_conversations_move_and_they_come_back(four_keys: None) -> None:
    before = chosen(now=0)
    CredentialPool.record(P, "sk-b", 429, model="m", now=0, retry_after_seconds=30)
    during = chosen(now=1)
    moved = {i for i in IDS if during[i] != before[i]}
    assert moved == {i for i in IDS if before[i] == "sk-b"}
    assert all(during[i] != "sk-b" for i in IDS)
    assert chosen(now=31) == before


def test_available_orders_free_keys_by_affinity(four_keys: None) -> None:
    ordered = CredentialPool.available(P, model="m", affinity="conversation-7")
    assert sorted(ordered) == sorted(KEYS)
    assert ordered[0] == CredentialPool.select(P, model="m", affinity="conversation-7")


def test_no_affinity_keeps_configured_order(four_keys: None) -> None:
    assert CredentialPool.available(P, model="m") == KEYS
    assert CredentialPool.select(P, model="m") == KEYS[0]
    assert CredentialPool.available(P, model="m", affinity="") == KEYS


def test_the_legacy_path_ignores_affinity(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BASE, KEYS[0])
    monkeypatch.setenv(f"{BASE}_1", KEYS[1])
    assert {CredentialPool.select(P, affinity=i) for i in IDS[:50]} == {KEYS[0]}


def test_affinity_must_be_a_string(four_keys: None) -> None:
    with pytest.raises(TypeError, match="affinity"):
        CredentialPool.select(P, model="m", affinity=7)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="affinity"):
        CredentialPool.available(P, model="m", affinity=b"x")  # type: ignore[arg-type]


PICK = """
import json, os, sys
os.environ.update({"MODEL_COOLDOWN_ENABLED": "true", "BASE": ""})
from cooldown import CredentialPool
ids = [f"conversation-{index}" for index in range(200)]
print(json.dumps([CredentialPool.select("ce-gpt-pro", model="m", affinity=i) for i in ids]))
"""


def test_two_processes_agree_without_sharing_anything(four_keys: None) -> None:
    import json
    import os

    environment = {k: v for k, v in os.environ.items()}
    answers = [
        json.loads(
            subprocess.run(
                [sys.executable, "-c", PICK],
                env=environment,
                capture_output=True,
                text=True,
                check=True,
                timeout=60,
            ).stdout
        )
        for _ in range(2)
    ]
    assert answers[0] == answers[1]
    assert answers[0] == [chosen()[f"conversation-{index}"] for index in range(200)]

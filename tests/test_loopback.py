"""The demo gateway and a fake upstream as real processes, talking HTTP over loopback."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest


def post(url: str, model: str) -> tuple[int, dict[str, str], dict[str, object]]:
    request = urllib.request.Request(
        url + "/v1/chat/completions",
        data=json.dumps({"model": model, "messages": []}).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), json.loads(error.read())


def dispatches(log: Path) -> list[tuple[str, str, int]]:
    if not log.exists():
        return []
    lines = log.read_text().splitlines()
    return [(e["key"], e["model"], e["status"]) for e in map(json.loads, lines)]


@pytest.fixture
def gateway(spawn: Callable[..., str], tmp_path: Path) -> tuple[str, Path]:
    log = tmp_path / "dispatch.log"
    upstream = spawn("cooldown.demo.upstream", "--quota", "1", "--window", "60", "--log", str(log))
    url = spawn(
        "cooldown.demo",
        "--upstream",
        upstream + "/v1",
        env={
            "MODEL_COOLDOWN_ENABLED": "true",
            "COOLDOWN_DEMO_API_KEY": "sk-loop-one",
            "COOLDOWN_DEMO_API_KEY_1": "sk-loop-two",
        },
    )
    return url, log


def test_throttled_key_is_skipped_and_all_cooling_answers_429(gateway: tuple[str, Path]) -> None:
    url, log = gateway
    assert post(url, "gpt-a")[0] == 200
    assert dispatches(log) == [("sk-loop-one", "gpt-a", 200)]

    assert post(url, "gpt-a")[0] == 200  # key one throttled: rotated to key two
    assert dispatches(log)[1:] == [("sk-loop-one", "gpt-a", 429), ("sk-loop-two", "gpt-a", 200)]

    status, headers, body = post(url, "gpt-a")  # key one is skipped without a dispatch
    assert dispatches(log)[3:] == [("sk-loop-two", "gpt-a", 429)]
    assert status == 429
    assert body["error"] == "model_cooldown"
    assert 1 <= int(headers["Retry-After"]) <= 60

    before = len(dispatches(log))
    status, headers, body = post(url, "gpt-a")
    assert status == 429
    assert int(headers["Retry-After"]) == body["retry_after"]
    assert len(dispatches(log)) == before  # the upstream received nothing

    assert post(url, "gpt-b")[0] == 200  # another model is not affected
    assert dispatches(log)[-1] == ("sk-loop-one", "gpt-b", 200)
    for secret in ("sk-loop-one", "sk-loop-two", "gpt-a"):
        assert secret not in json.dumps(body)

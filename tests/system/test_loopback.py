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

    assert post(url, "gpt-a")[0] == 200  # spread: the key dispatched least recently
    assert dispatches(log)[1:] == [("sk-loop-two", "gpt-a", 200)]

    status, headers, body = post(url, "gpt-a")  # both spent: each throttles once, then ours
    assert dispatches(log)[2:] == [("sk-loop-one", "gpt-a", 429), ("sk-loop-two", "gpt-a", 429)]
    assert status == 429
    assert body["error"]["code"] == "model_cooldown"  # type: ignore[index]
    assert 1 <= int(headers["Retry-After"]) <= 60

    before = len(dispatches(log))
    status, headers, body = post(url, "gpt-a")
    assert status == 429
    assert body["error"]["code"] == "model_cooldown"  # type: ignore[index]
    assert int(headers["Retry-After"]) == body["error"]["retry_after"]  # type: ignore[index]
    assert len(dispatches(log)) == before  # the upstream received nothing

    assert post(url, "gpt-b")[0] == 200  # another model is not affected
    assert dispatches(log)[-1] == ("sk-loop-one", "gpt-b", 200)
    for secret in ("sk-loop-one", "sk-loop-two", "gpt-a"):
        assert secret not in json.dumps(body)


def test_a_stream_crosses_both_processes_as_server_sent_events(
    spawn: Callable[..., str], tmp_path: Path
) -> None:
    upstream = spawn("cooldown.demo.upstream", "--quota", "5", "--window", "60")
    url = spawn(
        "cooldown.demo",
        "--upstream",
        upstream + "/v1",
        env={"MODEL_COOLDOWN_ENABLED": "true", "COOLDOWN_DEMO_API_KEY": "sk-stream-one"},
    )
    request = urllib.request.Request(
        url + "/v1/chat/completions",
        data=json.dumps({"model": "gpt-s", "stream": True, "messages": []}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/event-stream")
        assert response.headers["X-Upstream-Key-Index"] == "1"
        events = [line for line in response.read().decode().split("\n\n") if line]
    assert events[-1] == "data: [DONE]"
    assert json.loads(events[0].removeprefix("data: "))["object"] == "chat.completion.chunk"

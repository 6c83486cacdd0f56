"""`cooldown.usage.openrouter`: OpenRouter's key endpoint read over real loopback HTTP."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from cooldown import CredentialPool, Usage
from cooldown.pools import usage_readings
from cooldown.usage import UsageUnavailable, _openrouter_usage, openrouter

KEYS = ["sk-or-v1-spent-0123456789", "sk-or-v1-plenty-0123456789"]


class OpenRouter:
    """A loopback `GET /api/v1/key`: each key's `data`, as OpenRouter documents it."""

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}
        self.asked: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                key = self.headers.get("Authorization", "").removeprefix("Bearer ")
                owner.asked.append(self.path)
                if self.path != "/api/v1/key" or key not in owner.data:
                    self.send_response(401)
                    self.end_headers()
                    return
                body = json.dumps({"data": owner.data[key]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/api/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def api() -> Iterator[OpenRouter]:
    server = OpenRouter()
    yield server
    server.server.shutdown()
    server.server.server_close()


def key_data(limit: float | None, remaining: float | None, reset: str | None) -> dict[str, Any]:
    return {
        "label": "sk-or-v1-spe...789",
        "limit": limit,
        "limit_remaining": remaining,
        "limit_reset": reset,
        "usage": 0.5,
        "is_free_tier": False,
    }


def test_the_reader_asks_the_key_endpoint_with_the_key_as_bearer(api: OpenRouter) -> None:
    api.data[KEYS[0]] = key_data(10, 0, None)
    api.data[KEYS[1]] = key_data(None, None, None)
    read = openrouter(base_url=api.base_url + "/")
    assert read(KEYS[0]) == Usage(remaining=0, limit=10)
    assert read(KEYS[1]) == Usage()  # an unlimited key
    assert api.asked == ["/api/v1/key", "/api/v1/key"]


def test_a_refused_key_raises_without_the_key(api: OpenRouter) -> None:
    with pytest.raises(UsageUnavailable) as failed:
        openrouter(base_url=api.base_url)(KEYS[0])
    assert KEYS[0] not in str(failed.value)
    assert failed.value.__cause__ is None
    assert failed.value.__suppress_context__


@pytest.mark.parametrize(
    ("reset", "seconds"),
    [
        ("daily", 3600.0),
        ("weekly", 3600.0 + 86400 * 4),
        ("monthly", 3600.0 + 86400 * 22),
        (None, None),
    ],
)
def test_limit_reset_counts_to_the_next_utc_midnight_monday_or_first(
    reset: str | None, seconds: float | None
) -> None:
    now = datetime(2026, 12, 9, 23, 0, tzinfo=timezone.utc)  # a Wednesday, 23:00
    usage = _openrouter_usage({"data": key_data(25, 3.5, reset)}, now)
    assert usage == Usage(remaining=3.5, limit=25, resets_in=seconds)


@pytest.mark.parametrize(
    "document",
    [[], {"data": None}, {"data": key_data(10, "lots", None)}, {"data": key_data(True, 1, None)}],
)
def test_junk_from_the_endpoint_is_refused(document: Any) -> None:
    with pytest.raises(UsageUnavailable):
        _openrouter_usage(document, datetime.now(timezone.utc))


@pytest.mark.parametrize(("base_url", "error"), [("openrouter.ai/api", ValueError), (5, TypeError)])
def test_a_base_url_that_is_not_one_is_refused(base_url: Any, error: type) -> None:
    with pytest.raises(error):
        openrouter(base_url=base_url)


def test_a_pool_steers_by_the_endpoint_and_a_topped_up_key_comes_back(
    api: OpenRouter,
    enabled: None,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(usage_readings.UsageReadings, "start", lambda self, pool: None)
    api.data[KEYS[0]] = key_data(10, 0, "daily")
    api.data[KEYS[1]] = key_data(10, 9, "daily")
    pool = CredentialPool()
    pool.register("openrouter", keys=KEYS, usage=openrouter(base_url=api.base_url))
    with caplog.at_level("DEBUG", "cooldown"):
        assert pool.read_usage(now=100.0) == 2
        status = pool.status("openrouter", model="m", now=100.0)
        assert [row["reason"] for row in status["keys"]] == ["quota", None]
        api.data[KEYS[0]] = key_data(20, 10, "daily")
        assert pool.read_usage(now=160.0) == 2
        status = pool.status("openrouter", model="m", now=160.0)
    assert [row["reason"] for row in status["keys"]] == [None, None]
    assert status["keys"][0]["usage"]["remaining"] == 10
    shown = json.dumps(status) + "".join(record.getMessage() for record in caplog.records)
    assert not any(key in shown or key[:12] in shown for key in KEYS)

"""Every Python block in README.md and docs/*.md runs, and its Flask routes answer.

Each block runs alone in a fresh namespace, with the feature on and keys configured, exactly
as written: nothing is injected. `requests.post`, `httpx.post`, `httpx.Client.send` and
`httpx.AsyncClient.post` are faked so no block reaches the network. Every POST route of a
Flask app a block defines is then called once: a `NameError` inside a route fails here.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from flask import Flask

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
BODY = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}


def blocks() -> list[Any]:
    found = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for number, match in enumerate(FENCE.finditer(path.read_text()), start=1):
            found.append(pytest.param(path, match.group(1), id=f"{path.name}-{number}"))
    return found


class FakeUpstreamAnswer:
    """What `requests` and `httpx` hand back, minus the network."""

    status_code = 200
    headers: ClassVar = {
        "x-ratelimit-remaining-requests": "7",
        "x-ratelimit-reset-requests": "1s",
        "Content-Type": "application/json",
    }
    content = b'{"object": "chat.completion"}'
    text = content.decode()

    def json(self) -> dict[str, str]:
        return {"object": "chat.completion"}

    def iter_content(self, chunk_size: int | None = None) -> Iterator[bytes]:
        yield self.content


def answer(*args: object, **kwargs: object) -> FakeUpstreamAnswer:
    headers = kwargs.get("headers")
    if isinstance(headers, dict):  # the key a block sends with is a configured one
        assert headers["Authorization"].startswith("Bearer sk-docs-")
    return FakeUpstreamAnswer()


async def answer_async(*args: object, **kwargs: object) -> FakeUpstreamAnswer:
    return answer(*args, **kwargs)


@pytest.fixture
def documented_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    import httpx
    import requests

    monkeypatch.setenv("MODEL_COOLDOWN_ENABLED", "true")
    for base in ("CODEX_EVERYWHERE_API_KEY_GPT_PLUS_POOL", "CODEX_EVERYWHERE_API_KEY_GPT_PRO_POOL"):
        monkeypatch.setenv(base, "sk-docs-one")
        monkeypatch.setenv(f"{base}_1", "sk-docs-two")
    monkeypatch.setattr(requests, "post", answer)
    monkeypatch.setattr(httpx, "post", answer)
    monkeypatch.setattr(httpx.Client, "send", lambda client, request, **kwargs: answer())
    monkeypatch.setattr(httpx.AsyncClient, "post", answer_async)


def test_the_docs_have_python_blocks() -> None:
    assert len(blocks()) >= 8


@pytest.mark.usefixtures("documented_environment")
@pytest.mark.parametrize(("path", "code"), blocks())
def test_block_runs_and_its_routes_answer(path: Path, code: str) -> None:
    namespace: dict[str, Any] = {"__name__": f"docs_{path.stem}"}
    exec(compile(code, str(path), "exec"), namespace)
    for app in [value for value in namespace.values() if isinstance(value, Flask)]:
        app.testing = True  # exceptions propagate instead of becoming 500s
        client = app.test_client()
        for rule in app.url_map.iter_rules():
            if "POST" in (rule.methods or ()) and not rule.arguments:
                response = client.post(rule.rule, json=BODY)
                assert response.status_code < 500, (rule.rule, response.get_data(as_text=True))

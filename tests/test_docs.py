"""Every Python block in README.md and docs/*.md runs, and its Flask routes answer.

Each block runs alone in a fresh namespace, with the feature on and keys configured, exactly
as written: nothing is injected. `requests.post`, `httpx.post`, `httpx.Client.send`,
`httpx.AsyncClient.send` and `httpx.AsyncClient.post` are faked so no block reaches the
network; so are `httpx2`'s clients, through which the `openai` and `anthropic` SDKs send, so
their blocks run too, on real responses. Every POST route of a Flask or Starlette (FastAPI)
app a block defines is then called once: a `NameError` inside a route fails here.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest
from flask import Flask
from starlette.applications import Starlette
from starlette.testclient import TestClient

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


async def answer_async(*args: object, **kwargs: object) -> Any:
    import httpx

    answer(*args, **kwargs)  # checks the key
    return httpx.Response(200, json=COMPLETION, headers=FakeUpstreamAnswer.headers)


COMPLETION = {
    "id": "chatcmpl-docs",
    "object": "chat.completion",
    "created": 0,
    "model": "gpt-4o",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
    ],
}


REAL_HTTPX_SEND = httpx.Client.send


def http_answer(client: Any, request: Any, **kwargs: object) -> Any:
    """A real response of the client's own library (httpx, or the SDKs' httpx2) for what a
    block sent, from a configured key. Starlette's test client (an httpx client) calling the
    block's app goes through unfaked."""
    if isinstance(client, TestClient):
        return REAL_HTTPX_SEND(client, request, **kwargs)  # type: ignore[arg-type]
    sent_with = request.headers.get("Authorization", "") or request.headers.get("x-api-key", "")
    assert sent_with.removeprefix("Bearer ").startswith("sk-docs-")
    library = sys.modules[type(request).__module__.split(".")[0]]
    return library.Response(
        200, json=COMPLETION, headers=FakeUpstreamAnswer.headers, request=request
    )


async def http_answer_async(client: object, request: Any, **kwargs: object) -> Any:
    return http_answer(client, request)


@pytest.fixture
def documented_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    import httpx2
    import requests

    from cooldown import CredentialPool

    monkeypatch.setattr(CredentialPool, "_providers", dict(CredentialPool._providers))
    monkeypatch.setenv("MODEL_COOLDOWN_ENABLED", "true")
    for base in (
        "CODEX_EVERYWHERE_API_KEY_GPT_PLUS_POOL",
        "CODEX_EVERYWHERE_API_KEY_GPT_PRO_POOL",
        "CODEX_EVERYWHERE_API_KEY_CLAUDE_MAX",
    ):
        monkeypatch.setenv(base, "sk-docs-one")
        monkeypatch.setenv(f"{base}_1", "sk-docs-two")
    monkeypatch.setattr(requests, "post", answer)
    monkeypatch.setattr(httpx, "post", answer)
    for library in (httpx, httpx2):
        monkeypatch.setattr(library.Client, "send", http_answer)
        monkeypatch.setattr(library.AsyncClient, "send", http_answer_async)
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
    for asgi in [value for value in namespace.values() if isinstance(value, Starlette)]:
        with TestClient(asgi) as asgi_client:  # server exceptions propagate
            for route in asgi.routes:
                methods = getattr(route, "methods", None) or ()
                if "POST" in methods and "{" not in route.path:  # type: ignore[attr-defined]
                    answer = asgi_client.post(route.path, json=BODY)  # type: ignore[attr-defined]
                    assert answer.status_code == 200, (route.path, answer.text)


TEST_REFERENCE = re.compile(r"tests/[\w/]+\.py(?:::[\w*]+)?")


def test_every_test_the_docs_name_exists() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    named = {ref for page in pages for ref in TEST_REFERENCE.findall(page.read_text())}
    assert len(named) >= 10
    for reference in sorted(named):
        path, _, test = reference.partition("::")
        assert (ROOT / path).is_file(), reference
        if test:
            pattern = re.escape(test).replace(r"\*", r"\w*")
            source = (ROOT / path).read_text()
            assert re.search(rf"def {pattern}\(", source), reference

"""`init_app(app, upstream_errors=True)`: an upstream's error that reaches the view is a clean
502 (upstream 5xx) or the upstream's 4xx, generic, `no-store`, on Flask, Quart and Starlette."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import anthropic
import httpx
import openai
import pytest
import requests
from fastapi import FastAPI
from fastapi.testclient import TestClient
from flask import Flask
from quart import Quart

from cooldown import init_app
from cooldown.web.bodies import UPSTREAM_FAILED

LEAK = "Incorrect API key provided: sk-upstr***cret"


def upstream_response(status: int) -> httpx.Response:
    request = httpx.Request("POST", "https://api.example.com/v1/chat/completions")
    body = {"error": {"message": LEAK}}
    return httpx.Response(status, json=body, headers={"x-leak": LEAK}, request=request)


def openai_error(status: int) -> Exception:
    response = upstream_response(status)
    return openai.APIStatusError(LEAK, response=response, body=response.json())


def anthropic_error(status: int) -> Exception:
    response = upstream_response(status)
    return anthropic.APIStatusError(LEAK, response=response, body=response.json())


def httpx_error(status: int) -> Exception:
    response = upstream_response(status)
    return httpx.HTTPStatusError(LEAK, request=response.request, response=response)


def requests_error(status: int) -> Exception:
    response = requests.Response()
    response.status_code = status
    response._content = json.dumps({"error": {"message": LEAK}}).encode()
    return requests.HTTPError(LEAK, response=response)


ERRORS = [openai_error, anthropic_error, httpx_error, requests_error]


def flask_answer(error: Exception, **init: Any) -> tuple[int, dict[str, str], str]:
    app = Flask("gateway")
    init_app(app, **init)

    @app.post("/v1/chat/completions")
    def chat() -> str:
        raise error

    answer = app.test_client().post("/v1/chat/completions")
    return answer.status_code, dict(answer.headers), answer.get_data(as_text=True)


def quart_answer(error: Exception, **init: Any) -> tuple[int, dict[str, str], str]:
    app = Quart("gateway")
    init_app(app, **init)

    @app.post("/v1/chat/completions")
    async def chat() -> str:
        raise error

    async def call() -> tuple[int, dict[str, str], str]:
        answer = await app.test_client().post("/v1/chat/completions")
        return answer.status_code, dict(answer.headers), await answer.get_data(as_text=True)

    return asyncio.run(call())


def starlette_answer(error: Exception, **init: Any) -> tuple[int, dict[str, str], str]:
    app = FastAPI()
    init_app(app, **init)

    @app.post("/v1/chat/completions")
    async def chat() -> None:
        raise error

    answer = TestClient(app, raise_server_exceptions=False).post("/v1/chat/completions")
    return answer.status_code, dict(answer.headers), answer.text


FRAMEWORKS = [flask_answer, quart_answer, starlette_answer]
Answer = Callable[..., tuple[int, dict[str, str], str]]


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("made", ERRORS)
def test_an_upstream_5xx_is_a_generic_502(
    framework: Answer, made: Callable[[int], Exception]
) -> None:
    status, headers, body = framework(made(500), upstream_errors=True, error_format="openai")
    assert status == 502
    assert json.loads(body)["error"]["code"] == "upstream_error"
    assert {k.lower(): v for k, v in headers.items()}["cache-control"] == "no-store"
    assert "sk-upstr" not in body
    assert "sk-upstr" not in json.dumps(headers)
    assert "retry-after" not in {k.lower() for k in headers}


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("made", ERRORS)
def test_an_upstream_4xx_keeps_its_status(
    framework: Answer, made: Callable[[int], Exception]
) -> None:
    status, _, body = framework(made(404), upstream_errors=True)
    assert status == 404
    assert json.loads(body) == {
        "error": "upstream_error",
        "message": "The upstream provider refused this request.",
    }


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_an_upstream_429_gets_no_retry_after_of_ours(framework: Answer) -> None:
    status, headers, body = framework(openai_error(429), upstream_errors=True)
    assert status == 429
    assert "retry-after" not in {k.lower() for k in headers}
    assert "sk-upstr" not in body


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_anthropic_shape_names_the_upstream_failure_api_error(framework: Answer) -> None:
    _, _, body = framework(httpx_error(503), upstream_errors=True, error_format="anthropic")
    assert json.loads(body) == {
        "type": "error",
        "error": {
            "type": "api_error",
            "message": UPSTREAM_FAILED,
        },
    }


def test_a_requests_error_without_a_response_is_a_502() -> None:
    status, _, _ = flask_answer(requests.HTTPError(LEAK), upstream_errors=True)
    assert status == 502


def test_without_the_option_an_upstream_error_stays_the_apps_500() -> None:
    status, _, body = flask_answer(openai_error(500))
    assert status == 500
    assert "upstream_error" not in body


def test_the_option_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="upstream_errors"):
        init_app(Flask("bad"), upstream_errors="yes")  # type: ignore[arg-type]

"""`KeyedClients`: a client per key, built once, bounded, closed when dropped, keys never shown."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, ClassVar

import openai
import pytest

from cooldown import KeyedClients


class Client:
    built: ClassVar[list[str]] = []

    def __init__(self, key: str) -> None:
        self.key = key
        self.closed = False
        Client.built.append(key)

    def close(self) -> None:
        self.closed = True


@pytest.fixture(autouse=True)
def forget_built() -> None:
    Client.built = []


def test_a_client_is_built_once_per_key() -> None:
    clients = KeyedClients(Client)
    assert clients["sk-a"] is clients["sk-a"]
    assert Client.built == ["sk-a"]


def test_the_least_recently_used_is_dropped_and_closed() -> None:
    clients = KeyedClients(Client, max_size=2)
    first, second = clients["sk-a"], clients["sk-b"]
    clients["sk-a"]  # used again: now "sk-b" is the least recent
    third = clients["sk-c"]
    assert len(clients) == 2
    assert second.closed
    assert not first.closed
    assert not third.closed
    assert clients["sk-b"] is not second  # rebuilt on demand


def test_close_closes_every_client_held() -> None:
    clients = KeyedClients(Client)
    held = [clients["sk-a"], clients["sk-b"]]
    clients.close()
    assert all(client.closed for client in held)
    assert len(clients) == 0


def test_threads_racing_for_one_key_share_one_client_and_the_surplus_is_closed() -> None:
    gate = threading.Barrier(8)

    def slow(key: str) -> Client:
        gate.wait(timeout=5)  # every thread builds at once
        return Client(key)

    clients = KeyedClients(slow)
    got: list[Client] = []
    threads = [threading.Thread(target=lambda: got.append(clients["sk-a"])) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=5)
    assert len({id(client) for client in got}) == 1
    assert len(Client.built) == 8
    assert sum(not client.closed for client in got) == 8  # the kept one is open
    assert len(clients) == 1


def test_a_dropped_async_client_is_closed_on_the_running_loop() -> None:
    async def main() -> list[bool]:
        clients = KeyedClients(
            lambda key: openai.AsyncOpenAI(
                api_key=key, base_url="http://127.0.0.1:9", max_retries=0
            ),
            max_size=1,
        )
        first = clients["sk-a"]
        clients["sk-b"]  # drops "sk-a": its aclose is scheduled on this loop
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        closed = [first.is_closed()]
        held = clients["sk-b"]
        await clients.aclose()
        return [*closed, held.is_closed()]

    assert asyncio.run(main()) == [True, True]


def test_a_dropped_async_client_without_a_loop_is_left_to_the_collector() -> None:
    clients = KeyedClients(lambda key: openai.AsyncOpenAI(api_key=key, max_retries=0), max_size=1)
    clients["sk-a"]
    clients["sk-b"]  # no running loop: its close coroutine is closed unrun, no warning
    assert len(clients) == 1


def test_no_key_in_repr_or_errors() -> None:
    clients = KeyedClients(Client)
    clients["sk-secret-0123456789"]
    assert "sk-secret" not in repr(clients)
    with pytest.raises(TypeError) as raised:
        clients[b"sk-secret-0123456789"]  # type: ignore[index]
    assert "sk-secret" not in str(raised.value)


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"factory": "not callable"}, TypeError),
        ({"factory": Client, "max_size": 0}, ValueError),
        ({"factory": Client, "max_size": 4097}, ValueError),
        ({"factory": Client, "max_size": True}, TypeError),
        ({"factory": Client, "max_size": 2.0}, TypeError),
    ],
)
def test_wrong_arguments_are_clear_errors(
    arguments: dict[str, Any], error: type[Exception]
) -> None:
    factory = arguments.pop("factory")
    with pytest.raises(error):
        KeyedClients(factory, **arguments)

"""`KeyedClients`: a client per key, built once, bounded, closed when dropped, keys never shown."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
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


def test_the_least_recently_used_is_dropped_but_not_closed_under_its_holder() -> None:
    clients = KeyedClients(Client, max_size=2)
    first, second = clients["sk-a"], clients["sk-b"]
    clients["sk-a"]  # used again: now "sk-b" is the least recent
    third = clients["sk-c"]
    assert len(clients) == 2
    assert not second.closed  # this test still holds it: a call on it may be under way
    assert clients["sk-b"] is not second  # rebuilt on demand
    clients.close()  # shutdown closes what is still alive, dropped or held
    assert second.closed
    assert first.closed
    assert third.closed


def test_a_call_under_way_survives_its_clients_eviction() -> None:
    in_call, evicted = threading.Event(), threading.Event()
    outcome: list[str] = []

    class Busy(Client):
        def call(self) -> None:
            in_call.set()
            evicted.wait(timeout=5)
            outcome.append("closed" if self.closed else "served")

    clients: KeyedClients[Busy] = KeyedClients(Busy, max_size=1)
    caller = threading.Thread(target=lambda: clients["sk-a"].call())
    caller.start()
    assert in_call.wait(timeout=5)
    clients["sk-b"]  # evicts sk-a's client while its call is under way
    evicted.set()
    caller.join(timeout=5)
    assert outcome == ["served"]


def test_close_closes_every_client_held() -> None:
    clients = KeyedClients(Client)
    held = [clients["sk-a"], clients["sk-b"]]
    clients.close()
    assert all(client.closed for client in held)
    assert len(clients) == 0


def test_threads_racing_for_one_key_wait_for_one_build() -> None:
    gate = threading.Barrier(8)  # seven askers and this test

    def slow(key: str) -> Client:
        building.set()
        release.wait(timeout=5)  # every other thread asks while this build is under way
        return Client(key)

    building, release = threading.Event(), threading.Event()
    clients = KeyedClients(slow)
    got: list[Client] = []

    def ask() -> None:
        if threading.current_thread() is not threads[0]:
            gate.wait(timeout=5)
        got.append(clients["sk-a"])

    threads = [threading.Thread(target=ask) for _ in range(8)]
    threads[0].start()
    assert building.wait(timeout=5)
    for thread in threads[1:]:
        thread.start()
    gate.wait(timeout=5)  # the seven others are asking now ...
    threading.Event().wait(0.05)  # ... and reach the build under way before it ends
    release.set()
    for thread in threads:
        thread.join(timeout=5)
    assert len({id(client) for client in got}) == 1
    assert Client.built == ["sk-a"]  # the first caller builds; the others wait for it
    assert len(clients) == 1


def test_aclose_closes_dropped_and_held_async_clients() -> None:
    async def main() -> list[bool]:
        clients = KeyedClients(
            lambda key: openai.AsyncOpenAI(
                api_key=key, base_url="http://127.0.0.1:9", max_retries=0
            ),
            max_size=1,
        )
        first = clients["sk-a"]
        held = clients["sk-b"]  # drops "sk-a" unclosed: its holder may be mid-call
        dropped_open = not first.is_closed()
        await clients.aclose()
        return [dropped_open, first.is_closed(), held.is_closed()]

    assert asyncio.run(main()) == [True, True, True]


def test_an_async_client_serves_only_the_event_loop_it_was_built_on() -> None:
    clients = KeyedClients(lambda key: openai.AsyncOpenAI(api_key=key, max_retries=0))

    async def fetch_twice() -> tuple[object, object]:
        return clients["sk-a"], clients["sk-a"]

    first_loop = asyncio.run(fetch_twice())
    second_loop = asyncio.run(fetch_twice())  # a Flask async view: a new loop per request
    assert first_loop[0] is first_loop[1]
    assert second_loop[0] is second_loop[1]
    assert second_loop[0] is not first_loop[0]
    assert len(clients) == 1


class LoopBoundClient:
    """An async client as the SDKs build one: its connections belong to the loop it was
    built on, and if collected unclosed it schedules its own close on the running loop."""

    closes: ClassVar[list[str]] = []

    def __init__(self, key: str) -> None:
        self.loop = asyncio.get_running_loop()
        self.is_closed = False

    async def aclose(self) -> None:
        self.is_closed = True
        LoopBoundClient.closes.append("tried")
        if self.loop.is_closed():
            raise RuntimeError("Event loop is closed")

    def __del__(self) -> None:
        if not self.is_closed:
            with contextlib.suppress(RuntimeError):
                asyncio.get_running_loop().create_task(self.aclose())


def test_a_client_of_a_loop_that_is_over_is_closed_with_its_failure_retrieved(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clients = KeyedClients(LoopBoundClient)

    async def fetch() -> None:
        clients["sk-a"]
        await asyncio.sleep(0)

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        asyncio.run(fetch())  # a Flask async view: this loop closes after the request
        asyncio.run(fetch())  # the next request, on a new loop, drops the first client
        gc.collect()
    assert LoopBoundClient.closes == ["tried"]  # closed once, by KeyedClients
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]


def test_a_sync_client_serves_every_thread_and_loop() -> None:
    clients = KeyedClients(Client)
    built_outside = clients["sk-a"]

    async def inside() -> Client:
        return clients["sk-a"]

    assert asyncio.run(inside()) is built_outside


def test_every_close_is_tried_and_the_first_failure_raised() -> None:
    class Failing(Client):
        def close(self) -> None:
            raise OSError("close failed")

    async def main() -> list[bool]:
        clients = KeyedClients(lambda key: Failing(key) if key == "sk-a" else Client(key))
        clients["sk-a"]  # closed first: its failure must not stop the others
        others = [clients["sk-b"], clients["sk-c"]]
        with pytest.raises(OSError, match="close failed"):
            await clients.aclose()
        return [client.closed for client in others]

    assert asyncio.run(main()) == [True, True]
    clients = KeyedClients(lambda key: Failing(key) if key == "sk-a" else Client(key))
    clients["sk-a"]
    later = clients["sk-b"]
    with pytest.raises(OSError, match="close failed"):
        clients.close()
    assert later.closed


def test_a_factory_that_retries_is_warned_about_when_it_builds(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clients = KeyedClients(lambda key: openai.OpenAI(api_key=key))  # max_retries=2 by default
    with caplog.at_level("WARNING", "cooldown"):
        clients["sk-retrying-0123456789"]
        clients["sk-retrying-9876543210"]
    warned = [r for r in caplog.records if "max_retries" in r.getMessage()]
    assert len(warned) == 1
    assert "sk-retrying" not in caplog.text
    clients.close()


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

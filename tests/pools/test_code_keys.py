"""`register(provider, keys=...)`: keys from code, a list or a secret manager's callable."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from cooldown import CredentialPool
from cooldown.pools import code_keys

from ..conftest import ServedWithoutHeaders, longest_loop_gap

P = "from-code"


@pytest.fixture(autouse=True)
def unregister() -> Iterator[None]:
    yield
    CredentialPool._providers.pop(P, None)


def test_a_list_of_keys_is_pooled_in_order_stripped_unique_without_placeholders(
    fresh_warnings: None,
) -> None:
    CredentialPool.register(P, keys=[" sk-a ", "sk-b", "sk-a", "", "your-key-here", "sk-c"])
    assert CredentialPool.keys(P) == ["sk-a", "sk-b", "sk-c"]
    assert CredentialPool.select(P) == "sk-a"


def test_a_callable_is_called_on_first_use_and_at_most_once_a_second(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [1000.0]
    monkeypatch.setattr(code_keys.time, "monotonic", lambda: clock[0])
    calls: list[float] = []
    rotation = [["sk-old"], ["sk-new", "sk-old"]]

    def secret_manager() -> list[str]:
        calls.append(clock[0])
        return rotation[min(len(calls), 2) - 1]

    CredentialPool.register(P, keys=secret_manager)
    assert calls == []  # not at register: on first use
    assert CredentialPool.keys(P) == ["sk-old"]
    clock[0] += 0.9
    assert CredentialPool.keys(P) == ["sk-old"]
    assert CredentialPool.select(P) == "sk-old"
    assert len(calls) == 1
    clock[0] += 0.1
    assert CredentialPool.keys(P) == ["sk-new", "sk-old"]
    assert calls == [1000.0, 1001.0]


def test_a_failing_callable_keeps_the_last_good_keys_and_warns_once_without_its_text(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, fresh_warnings: None
) -> None:
    clock = [0.0]
    monkeypatch.setattr(code_keys.time, "monotonic", lambda: clock[0])
    answers: list[Any] = [["sk-good"], RuntimeError("vault said sk-leaked"), RuntimeError("x")]

    def source() -> list[str]:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer  # type: ignore[no-any-return]

    CredentialPool.register(P, keys=source)
    with caplog.at_level(logging.WARNING, "cooldown"):
        assert CredentialPool.keys(P) == ["sk-good"]
        for _ in range(2):
            clock[0] += 1
            assert CredentialPool.keys(P) == ["sk-good"]
    assert len([r for r in caplog.records if P in r.getMessage()]) == 1
    assert "sk-leaked" not in caplog.text


def test_a_callable_failing_before_any_success_means_no_keys(fresh_warnings: None) -> None:
    CredentialPool.register(P, keys=lambda: 1 / 0)  # type: ignore[arg-type, return-value]
    assert CredentialPool.keys(P) == []
    assert CredentialPool.select(P) is None


@pytest.mark.parametrize("keys", [[b"sk-bytes"], ["sk-a", 5], "sk-single-string", 5])
def test_non_strings_are_a_type_error_naming_the_provider_never_the_value(keys: Any) -> None:
    with pytest.raises(TypeError, match=P) as raised:
        CredentialPool.register(P, keys=keys)
    assert "sk-" not in str(raised.value)


def test_a_callable_returning_non_strings_is_a_type_error_at_use() -> None:
    CredentialPool.register(P, keys=lambda: ["sk-a", None])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=P):
        CredentialPool.keys(P)


def test_threads_on_first_use_share_one_call() -> None:
    entered, release = threading.Event(), threading.Event()
    calls: list[int] = []

    def slow() -> list[str]:
        calls.append(1)
        entered.set()
        release.wait(timeout=5)
        return ["sk-a"]

    CredentialPool.register(P, keys=slow)
    seen: list[list[str]] = []
    first = threading.Thread(target=lambda: seen.append(CredentialPool.keys(P)))
    first.start()
    assert entered.wait(timeout=5)
    second = threading.Thread(target=lambda: seen.append(CredentialPool.keys(P)))
    second.start()
    time.sleep(0.05)  # the second caller is waiting for the first call, not calling again
    release.set()
    first.join(timeout=5)
    second.join(timeout=5)
    assert calls == [1]
    assert seen == [["sk-a"], ["sk-a"]]


def test_re_registering_replaces_the_source(monkeypatch: pytest.MonkeyPatch) -> None:
    CredentialPool.register(P, keys=["sk-a"])
    monkeypatch.setenv("FROM_ENV_KEY", "sk-env")
    CredentialPool.register(P, "FROM_ENV_KEY")
    assert CredentialPool.keys(P) == ["sk-env"]
    CredentialPool.register(P, keys=["sk-b"])
    assert CredentialPool.keys(P) == ["sk-b"]


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"base_env": "X", "keys": ["sk-a"]}, TypeError),
        ({}, TypeError),
        ({"base_env": None}, TypeError),
        ({"base_env": 5}, TypeError),
        ({"base_env": ""}, ValueError),
        ({"base_env": "A=B"}, ValueError),
        ({"base_env": "\ud800"}, ValueError),
    ],
)
def test_register_refuses_what_cannot_be_a_source(
    arguments: dict[str, Any], error: type[Exception]
) -> None:
    with pytest.raises(error):
        CredentialPool.register(P, **arguments)
    assert not CredentialPool.pooled(P)


def test_register_names_wrong_provider_types() -> None:
    with pytest.raises(TypeError, match="provider"):
        CredentialPool.register(123, "X")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="provider"):
        CredentialPool.register("", "X")


def test_scoped_dispatch_rotates_over_keys_from_code(enabled: None) -> None:
    CredentialPool.register(P, keys=["sk-a", "sk-b"])

    class Answer:
        def __init__(self, status: int) -> None:
            self.status_code, self.headers = status, {}

    sent: list[str] = []

    def send(key: str) -> Answer:
        sent.append(key)
        return Answer(429 if key == "sk-a" else 200)

    assert CredentialPool.dispatch(P, send, model="m", order="configured").status_code == 200
    assert sent == ["sk-a", "sk-b"]


# -- a source that overruns, gives nothing, or would stall an event loop --------------------


@pytest.fixture
def short_calls(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Calls abandoned after 50 ms (instead of 5 s), on a clock the test moves."""
    clock = [0.0]
    monkeypatch.setattr(code_keys, "CALL_SECONDS", 0.05)
    monkeypatch.setattr(code_keys.time, "monotonic", lambda: clock[0])
    return clock


def test_a_call_that_overruns_is_abandoned_and_the_next_refresh_calls_again(
    short_calls: list[float], caplog: pytest.LogCaptureFixture, fresh_warnings: None
) -> None:
    release = threading.Event()
    answers = iter([["sk-good"], None, ["sk-newer"]])  # None: hang until released
    calls: list[int] = []

    def vault() -> list[str]:
        calls.append(1)
        answer = next(answers)
        if answer is None:
            release.wait(timeout=5)
            return ["sk-late"]
        return answer

    CredentialPool.register(P, keys=vault)
    with caplog.at_level(logging.WARNING, "cooldown"):
        assert CredentialPool.keys(P) == ["sk-good"]
        short_calls[0] += 1
        assert CredentialPool.keys(P) == ["sk-good"]  # abandoned after 50 ms: the last good
        short_calls[0] += 1
        assert CredentialPool.keys(P) == ["sk-newer"]  # the next refresh called it again
    release.set()
    assert len(calls) == 3
    overran = [r for r in caplog.records if "did not return" in r.getMessage()]
    assert len(overran) == 1
    assert "sk-" not in caplog.text


def test_a_first_call_that_overruns_means_no_keys_at_once(short_calls: list[float]) -> None:
    release = threading.Event()
    CredentialPool.register(P, keys=lambda: release.wait(timeout=5) and ["sk-late"])  # type: ignore[arg-type, return-value]
    waited = time.perf_counter()
    assert CredentialPool.keys(P) == []
    assert CredentialPool.select(P) is None
    release.set()
    assert time.perf_counter() - waited < 2  # not the 10 s every request used to wait


def test_a_source_that_never_returns_holds_at_most_a_few_threads(
    short_calls: list[float],
) -> None:
    release = threading.Event()
    calls: list[int] = []

    def hung() -> list[str]:
        calls.append(1)
        release.wait(timeout=5)
        return ["sk-late"]

    CredentialPool.register(P, keys=hung)
    for _ in range(code_keys.MAX_ABANDONED_CALLS + 3):
        assert CredentialPool.keys(P) == []
        short_calls[0] += 1
    release.set()
    assert len(calls) == code_keys.MAX_ABANDONED_CALLS


def test_a_source_returning_none_keeps_the_last_good_keys_with_one_warning(
    short_calls: list[float], caplog: pytest.LogCaptureFixture, fresh_warnings: None
) -> None:
    answers = iter([["sk-good"], None, None])
    CredentialPool.register(P, keys=lambda: next(answers))  # type: ignore[arg-type, return-value]
    with caplog.at_level(logging.WARNING, "cooldown"):
        assert CredentialPool.keys(P) == ["sk-good"]
        for _ in range(2):
            short_calls[0] += 1
            assert CredentialPool.keys(P) == ["sk-good"]
            assert CredentialPool.status(P)["ready"] == 1
    assert len([r for r in caplog.records if "returned None" in r.getMessage()]) == 1


def test_adispatch_reads_a_slow_source_off_the_event_loop(enabled: None) -> None:
    def vault() -> list[str]:
        threading.Event().wait(0.3)  # a secret manager's round trip
        return ["sk-vault-0123456789"]

    CredentialPool.register(P, keys=vault)

    async def send(key: str) -> ServedWithoutHeaders:
        return ServedWithoutHeaders()

    stall, served = longest_loop_gap(lambda: CredentialPool.adispatch(P, send, model="m"))
    assert served is not None
    assert stall < 0.1  # the 0.3 s read happened in a worker thread

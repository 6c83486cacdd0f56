"""A gateway worker process for the shared-state tests: JSON commands in, JSON answers out.

Started by tests/test_shared.py with MODEL_COOLDOWN_* in its environment. With
`--shared-cap N` it drives its own store, attached to Redis with a small shared cap.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

from cooldown import (
    QUOTA_SPENT,
    CooldownError,
    CredentialPool,
    ModelCooldown,
    NanoGPTKeyPool,
    NanoGPTKeyPoolExhausted,
    Usage,
    classify_upstream_outcome,
    model_cooldown,
)
from cooldown.digests import scope_message
from cooldown.evidence.learn import window_learner
from cooldown.shared.observations import RedisObservations


def small_cap_store(cap: int) -> ModelCooldown:
    store = ModelCooldown()
    backend = RedisObservations(
        os.environ["MODEL_COOLDOWN_REDIS_URL"],
        prefix=os.environ["MODEL_COOLDOWN_REDIS_PREFIX"],
        max_entries=cap,
    )
    store.attach_shared(backend, secret=os.environ["MODEL_COOLDOWN_REDIS_SECRET"].encode())
    return store


@dataclass
class Answer:
    """What a held `send` answers: a status and its headers."""

    status_code: int = 200
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class HeldDispatch:
    """A real `CredentialPool.dispatch` in a thread whose `send` blocks until told to answer."""

    sent: threading.Event = field(default_factory=threading.Event)
    answer: threading.Event = field(default_factory=threading.Event)
    keys: list[str] = field(default_factory=list)
    response: Answer = field(default_factory=Answer)
    outcome: Any = None

    def send(self, key: str) -> Answer:
        self.keys.append(key)
        self.sent.set()
        assert self.answer.wait(10), "the test never answered"
        return self.response

    def run(self, command: dict[str, Any]) -> None:
        try:
            result = CredentialPool.dispatch(
                command["provider"], self.send, **command["scope"], now=command["now"]
            )
            self.outcome = {"status": None if result is None else result.status_code}
        except CooldownError as error:
            self.outcome = {"error": type(error).__name__, "retry_after": error.retry_after}
        self.sent.set()


held: dict[str, tuple[HeldDispatch, threading.Thread]] = {}


def hold_dispatch(command: dict[str, Any]) -> Any:
    """Start a dispatch; answer with the key it sends with (or its error, if it sends none)."""
    dispatch = HeldDispatch()
    thread = threading.Thread(target=dispatch.run, args=(command,))
    held[command["name"]] = (dispatch, thread)
    thread.start()
    assert dispatch.sent.wait(10)
    return {"key": dispatch.keys[-1]} if dispatch.keys else dispatch.outcome


def answer_dispatch(command: dict[str, Any]) -> Any:
    """Let the held `send` return `status` (with `headers`); the dispatch's result."""
    dispatch, thread = held.pop(command["name"])
    dispatch.response = Answer(command["status"], command.get("headers", {}))
    dispatch.answer.set()
    thread.join(10)
    return {**dispatch.outcome, "keys": dispatch.keys}


def spent_first_key(keys: list[str]) -> Any:
    """A usage reader: the first key is out of credit, the others have plenty."""

    def read(key: str) -> Usage:
        return Usage(remaining=0 if key == keys[0] else 5, limit=5)

    return read


def quotas(command: dict[str, Any]) -> Any:
    """Quotas beyond the minute: register with limits or a reader, read usage, dispatch."""
    op = command["op"]
    if op == "register_quotas":
        usage = spent_first_key(command["keys"]) if command.get("usage") else None
        CredentialPool.register(
            command["provider"], keys=command["keys"], limits=command.get("limits"), usage=usage
        )
        return None
    if op == "read_usage":
        return CredentialPool.read_usage()
    sent: list[str] = []
    CredentialPool.dispatch(
        command["provider"], lambda key: sent.append(key) or Answer(), model=command["model"]
    )
    return sent


def handle(command: dict[str, Any], store: ModelCooldown) -> Any:
    if command["op"] in ("register_quotas", "read_usage", "dispatch"):
        return quotas(command)
    op = command.pop("op")
    if op == "hold_dispatch":
        return hold_dispatch(command)
    if op == "answer_dispatch":
        return answer_dispatch(command)
    if op == "learned_bounds":
        scope = scope_message(command["model"], None)
        assert scope is not None
        return window_learner.bounds(command["provider"], command["key"], scope)
    if op == "select":
        return CredentialPool.select(command["provider"], **command["scope"], now=command["now"])
    if op == "record":
        CredentialPool.record(
            command["provider"],
            command["key"],
            command["status"],
            **command["scope"],
            retry_after_seconds=command.get("retry_after"),
            outcome=QUOTA_SPENT if command.get("quota_spent") else None,
            now=command["now"],
        )
        return None
    if op == "nano_select":
        statuses = command["statuses"]
        return NanoGPTKeyPool.select_key(
            command["keys"], statuses.__getitem__, model=command["model"], now=command["now"]
        )
    if op == "nano_record":
        NanoGPTKeyPool.record_result(
            command["key"], command["status"], model=command["model"], now=command["now"]
        )
        return None
    if op == "store_record":
        return store.record(
            "p",
            command["key"],
            classify_upstream_outcome(429),
            model=command["model"],
            retry_after_seconds=command["retry_after"],
            now=command["now"],
        )
    if op == "store_select":
        return store.select("p", command["keys"], model=command["model"], now=command["now"])
    if op == "stats":
        return (model_cooldown if POOL_STATS else store).stats()
    raise ValueError(f"unknown op {op}")


POOL_STATS = "--stats-of-pool" in sys.argv


def main() -> None:
    store = model_cooldown
    if len(sys.argv) == 3 and sys.argv[1] == "--shared-cap":
        store = small_cap_store(int(sys.argv[2]))
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        try:
            answer: dict[str, Any] = {"value": handle(json.loads(line), store)}
        except CooldownError as error:
            answer = {"error": type(error).__name__, "retry_after": error.retry_after}
        except NanoGPTKeyPoolExhausted as error:
            answer = {"error": type(error).__name__, "message": str(error)}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()

"""A gateway worker process for the shared-state tests: JSON commands in, JSON answers out.

Started by tests/test_shared.py with MODEL_COOLDOWN_* in its environment. With
`--shared-cap N` it drives its own store, attached to Redis with a small shared cap.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from cooldown import (
    CooldownError,
    CredentialPool,
    ModelCooldown,
    NanoGPTKeyPool,
    NanoGPTKeyPoolExhausted,
    classify_upstream_outcome,
    model_cooldown,
)
from cooldown.shared import RedisObservations


def small_cap_store(cap: int) -> ModelCooldown:
    store = ModelCooldown()
    backend = RedisObservations(
        os.environ["MODEL_COOLDOWN_REDIS_URL"],
        prefix=os.environ["MODEL_COOLDOWN_REDIS_PREFIX"],
        max_entries=cap,
    )
    store.attach_shared(backend, secret=os.environ["MODEL_COOLDOWN_REDIS_SECRET"].encode())
    return store


def handle(command: dict[str, Any], store: ModelCooldown) -> Any:
    op = command.pop("op")
    if op == "select":
        return CredentialPool.select(command["provider"], **command["scope"], now=command["now"])
    if op == "record":
        CredentialPool.record(
            command["provider"],
            command["key"],
            command["status"],
            **command["scope"],
            retry_after_seconds=command.get("retry_after"),
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

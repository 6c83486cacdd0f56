"""Declared limits and usage readings hold for the fleet: two real gateway processes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

Worker = Callable[..., Any]  # conftest.Worker

SECRET = "fleet-quotas-secret-" + "z" * 40
P = "fleet-quotas"
KEYS = ["sk-fleet-quota-one-012345", "sk-fleet-quota-two-012345"]


@pytest.fixture
def workers(
    redis_url: str, prefix: str, worker_processes: Callable[..., list[Worker]]
) -> list[Worker]:
    return worker_processes(
        2,
        {
            "MODEL_COOLDOWN_ENABLED": "true",
            "MODEL_COOLDOWN_REDIS_URL": redis_url,
            "MODEL_COOLDOWN_REDIS_SECRET": SECRET,
            "MODEL_COOLDOWN_REDIS_PREFIX": prefix,
        },
    )


def test_a_declared_minute_counts_both_processes(workers: list[Worker]) -> None:
    for worker in workers:
        worker("register_quotas", provider=P, keys=KEYS[:1], limits={"requests": {"minute": 2}})
    first, second = workers
    assert first("dispatch", provider=P, model="m") == {"value": KEYS[:1]}
    assert second("dispatch", provider=P, model="m") == {"value": KEYS[:1]}
    for worker in workers:  # the fleet's two are taken: neither process sends a third
        refused = worker("dispatch", provider=P, model="m")
        assert refused["error"] == "ModelCooldownExhausted"
        assert 59 <= refused["retry_after"] <= 61


def test_one_process_reads_each_key_and_its_reading_holds_in_the_other(
    workers: list[Worker],
) -> None:
    for worker in workers:
        worker("register_quotas", provider=P, keys=KEYS, usage=True)
    first, second = workers
    assert first("read_usage") == {"value": 2}
    assert second("read_usage") == {"value": 0}  # the first holds both keys' leases
    for _ in range(3):  # the first key is out of credit: the second process never sends it
        assert second("dispatch", provider=P, model="m") == {"value": KEYS[1:]}

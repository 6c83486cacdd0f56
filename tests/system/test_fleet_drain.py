"""A drain through one worker of a 4-worker gunicorn fleet on a real Redis holds in every
worker, and in the workers of a fleet started after it, until it is undrained."""

from __future__ import annotations

import json
import textwrap
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..conftest import fleet_environment, gunicorn_app

TOKEN = "drain-fleet-token-" + "x" * 24
WORKERS = 4
APP = textwrap.dedent(
    """
    import os
    import time

    from flask import Flask, jsonify
    from cooldown import CredentialPool, init_app, status_blueprint

    KEYS = ["sk-drain-fleet-one", "sk-drain-fleet-two"]
    CredentialPool.register("fleet", keys=KEYS)
    app = Flask("fleet")
    init_app(app)
    app.register_blueprint(status_blueprint())


    @app.post("/ask")
    def ask():
        time.sleep(0.2)  # a busy sync worker: requests sent meanwhile reach the others
        key = CredentialPool.select("fleet", model="m")
        return jsonify(pid=os.getpid(), position=KEYS.index(key) + 1)
    """
)


def call(url: str, path: str, *, method: str = "GET", auth: bool = True) -> Any:
    headers = {"Authorization": f"Bearer {TOKEN}"} if auth else {}
    request = urllib.request.Request(url + path, method=method, headers=headers)
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.load(answer)


def positions_by_worker(url: str) -> dict[int, set[int]]:
    """Which key each worker selects, asked until every worker has answered."""
    seen: dict[int, set[int]] = {}
    for _ in range(20):
        with ThreadPoolExecutor(WORKERS * 2) as pool:
            answers = list(pool.map(lambda _: call(url, "/ask", method="POST"), range(16)))
        for answer in answers:
            seen.setdefault(answer["pid"], set()).add(answer["position"])
        if len(seen) == WORKERS:
            return seen
    raise AssertionError(f"only {len(seen)} of {WORKERS} workers answered")


def settles_on(url: str, position: int) -> dict[int, set[int]]:
    """Ask every worker until each selects only `position`: a worker may reuse its read of
    the fleet's drains for a quarter second, so a round or two may still see the old one."""
    deadline = time.monotonic() + 10
    while True:
        seen = positions_by_worker(url)
        if all(positions == {position} for positions in seen.values()):
            return seen
        assert time.monotonic() < deadline, seen


def test_a_drain_holds_in_every_worker_and_after_a_restart(
    tmp_path: Path, redis_url: str, prefix: str
) -> None:
    (tmp_path / "drain_app.py").write_text(APP)
    environment = fleet_environment(redis_url, prefix, TOKEN)
    with gunicorn_app(tmp_path, "drain_app", environment, workers=WORKERS) as url:
        assert set().union(*positions_by_worker(url).values()) == {1}  # configured order
        label = call(url, "/cooldown/status/fleet")["keys"][0]["label"]
        drained = call(url, f"/cooldown/keys/fleet/{label}/drain", method="POST")
        assert drained["state"] == "drained"
        settles_on(url, 2)
    with gunicorn_app(tmp_path, "drain_app", environment, workers=WORKERS) as url:  # restarted
        seen = positions_by_worker(url)
        assert all(positions == {2} for positions in seen.values()), seen
        assert call(url, "/cooldown/status/fleet")["keys"][0]["state"] == "drained"
        call(url, f"/cooldown/keys/fleet/{label}/undrain", method="POST")
        settles_on(url, 1)

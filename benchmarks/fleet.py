"""Where a benchmark's processes run: its upstream on a loopback port in a thread, and its
gateway under gunicorn (4 gthread workers of 8 threads, so 32 requests are in flight, sharing
state through one fresh Redis prefix, or each with its own state)."""

from __future__ import annotations

import logging
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import requests
from flask import Flask
from werkzeug.serving import make_server

REDIS_URL = os.environ.get("MODEL_COOLDOWN_TEST_REDIS_URL") or "redis://127.0.0.1:6379/0"
WORKERS, THREADS = 4, 8


def open_loop(
    total: int,
    rate: float,
    clients: int,
    request_one: Callable[[int, requests.Session], int],
    due: list[float] | None = None,
) -> list[tuple[int, float]]:
    """Offer requests 0 .. total - 1 at `rate` a second (or each at its `due` offset, in
    seconds), each due at its own moment whatever the answers before it (open loop), from
    `clients` threads with a session each; per request, in order: the status its client saw
    and how long it took."""
    answered: list[tuple[int, float]] = [(0, 0.0)] * total
    next_index = iter(range(total))
    start = time.monotonic()

    def client() -> None:
        session = requests.Session()
        for index in next_index:
            offset = index / rate if due is None else due[index]
            time.sleep(max(0.0, start + offset - time.monotonic()))
            sent = time.monotonic()
            status = request_one(index, session)
            answered[index] = (status, time.monotonic() - sent)
        session.close()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answered


_sessions = threading.local()


def thread_session() -> requests.Session:
    """This thread's HTTP session to the upstream (a gateway worker's threads keep one each)."""
    if not hasattr(_sessions, "session"):
        _sessions.session = requests.Session()
    session: requests.Session = _sessions.session
    return session


def p50_p99_ms(seconds: list[float]) -> tuple[float, float]:
    """The median and the 99th percentile of `seconds`, in milliseconds (0 for none)."""
    ordered = sorted(seconds) or [0.0]
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return 1000 * statistics.median(ordered), 1000 * p99


def serve_upstream(app: Flask) -> tuple[str, Callable[[], None]]:
    """Serve `app` on a free loopback port from a thread; its base URL, and how to stop it."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    server = make_server("127.0.0.1", 0, app, threaded=True)
    server.socket.listen(128)
    threading.Thread(target=server.serve_forever, daemon=True).start()

    def stop() -> None:
        server.shutdown()
        server.server_close()

    return f"http://127.0.0.1:{server.server_port}", stop


@contextmanager
def gunicorn_gateway(app: str, env: dict[str, str], *, shared: bool = True) -> Iterator[str]:
    """Run `app` ("module:app", a module beside this one) with `env` added to an environment
    free of MODEL_ settings; yields its base URL. With `shared`, the workers share a prefix
    of their own on `REDIS_URL`, deleted afterwards."""
    import redis

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    environment = {key: value for key, value in os.environ.items() if not key.startswith("MODEL_")}
    environment.update(env, MODEL_COOLDOWN_ENABLED="true")
    if shared:
        environment.update(
            MODEL_COOLDOWN_REDIS_URL=REDIS_URL,
            MODEL_COOLDOWN_REDIS_SECRET="benchmark-secret-" + "c" * 32,
            MODEL_COOLDOWN_REDIS_PREFIX=prefix,
        )
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-w", str(WORKERS), "-k", "gthread",
         "--threads", str(THREADS), "--backlog", "256", "-b", f"127.0.0.1:{port}",
         "--log-level", "warning", "--pythonpath", str(Path(__file__).parent), app],
        env=environment,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        for _ in range(WORKERS * THREADS):  # every worker booted and answering
            while True:
                try:
                    requests.post(f"http://127.0.0.1:{port}/", timeout=5)
                    break
                except requests.ConnectionError:
                    assert time.monotonic() < deadline, "gunicorn did not start"
                    time.sleep(0.1)
        time.sleep(1.0)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=30)
        client = redis.Redis.from_url(REDIS_URL)
        for key in client.scan_iter(f"{{{prefix}}}:*"):
            client.delete(key)
        client.close()

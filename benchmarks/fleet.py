"""Where a benchmark's processes run: its upstream on a loopback port in a thread, and its
gateway under gunicorn (4 gthread workers of 8 threads, so 32 requests are in flight, sharing
state through one fresh Redis prefix, or each with its own state)."""

from __future__ import annotations

import logging
import os
import socket
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

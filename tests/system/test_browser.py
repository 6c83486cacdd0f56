"""A real headless Chromium reads `Retry-After` from a cross-origin 429, or cannot."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from flask import Flask, Response, request

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)"
)

PAGE = """<!doctype html>
<html><body><pre id="out">pending</pre>
<script>
fetch("%(target)s", {
  method: "POST",
  headers: {"Content-Type": "application/json"},
  body: JSON.stringify({model: "gpt-browser"})
}).then(r => {
  document.getElementById("out").textContent =
    "status=" + r.status + " retry-after=" + r.headers.get("Retry-After");
}).catch(e => { document.getElementById("out").textContent = "failed: " + e; });
</script></body></html>"""


def page_app(target: list[str]) -> Flask:
    """Serves the page; `target` is filled in once the server it calls has started."""
    app = Flask("page")
    app.add_url_rule("/", view_func=lambda: PAGE % {"target": target[0]})
    return app


def read_in_browser(page_url: str, profile: Path) -> str:
    """Load the page headless and return what the script wrote into it."""
    assert CHROMIUM is not None
    completed = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={profile}",
            "--virtual-time-budget=10000",
            "--dump-dom",
            page_url,
        ],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    found = re.search(r'<pre id="out">(.*?)</pre>', completed.stdout)
    assert found, completed.stderr[-2000:]
    return found.group(1)


def test_browser_reads_retry_after_from_the_gateway(
    spawn: Callable[..., str], serve_in_thread: Callable[[Flask], str], tmp_path: Path
) -> None:
    target: list[str] = []
    page = serve_in_thread(page_app(target))
    gateway = spawn(  # quota 0: every key is throttled, so the gateway answers its own 429
        "cooldown.demo",
        "--quota",
        "0",
        "--cors-origin",
        page,
        env={"MODEL_COOLDOWN_ENABLED": "true"},
    )
    target.append(gateway + "/v1/chat/completions")
    assert read_in_browser(page, tmp_path / "profile") == "status=429 retry-after=20"


def test_without_exposure_the_browser_cannot_read_retry_after(
    serve_in_thread: Callable[[Flask], str], tmp_path: Path
) -> None:
    bare = Flask("bare")

    @bare.route("/", methods=["POST", "OPTIONS"])
    def throttled() -> Response:
        if request.method == "OPTIONS":
            return Response(status=204)
        return Response("{}", status=429, headers={"Retry-After": "20"})

    @bare.after_request
    def allow_any_origin(response: Response) -> Response:
        response.headers["Access-Control-Allow-Origin"] = "*"
        response.headers["Access-Control-Allow-Headers"] = "Content-Type"
        return response

    page = serve_in_thread(page_app([serve_in_thread(bare) + "/"]))
    assert read_in_browser(page, tmp_path / "profile") == "status=429 retry-after=null"

"""A real headless Chromium opens the status page, types the token, looks up a model.

Chromium is driven over its DevTools protocol with a few lines of standard-library
WebSocket code: the test types into the inputs, clicks the button, reads the rendered
per-key table from the DOM and keeps a screenshot under the pytest temp dir.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import struct
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask, request
from werkzeug.serving import make_server

from cooldown import QUOTA_SPENT, CredentialPool, init_app, status_blueprint

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)"
)
P = "ce-gpt-pro"
BASE = "CODEX_EVERYWHERE_API_KEY_GPT_PRO_POOL"
KEYS = ["sk-page-key-one-000000", "sk-page-key-two-000000", "sk-page-key-three-0000"]
TOKEN = "page-token-" + "0123456789" * 3


class DevTools:
    """One WebSocket to a page target: send a command, wait for its answer."""

    def __init__(self, url: str) -> None:
        host, port, path = _split_ws(url)
        self.sock = socket.create_connection((host, port), timeout=30)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n".encode()
        )
        handshake = b""
        while b"\r\n\r\n" not in handshake:
            handshake += self.sock.recv(1)
        assert b" 101 " in handshake.split(b"\r\n")[0], handshake
        self.next_id = 0

    def _send(self, text: str) -> None:
        payload = text.encode()
        mask = os.urandom(4)
        header = bytes([0x81])
        if len(payload) < 126:
            header += bytes([0x80 | len(payload)])
        elif len(payload) < 65536:
            header += bytes([0x80 | 126]) + struct.pack(">H", len(payload))
        else:
            header += bytes([0x80 | 127]) + struct.pack(">Q", len(payload))
        masked = bytes(byte ^ mask[index % 4] for index, byte in enumerate(payload))
        self.sock.sendall(header + mask + masked)

    def _exactly(self, count: int) -> bytes:
        data = b""
        while len(data) < count:
            chunk = self.sock.recv(count - len(data))
            assert chunk, "DevTools closed the connection"
            data += chunk
        return data

    def _receive(self) -> str:
        message = b""
        while True:
            first, second = self._exactly(2)
            length = second & 0x7F
            if length == 126:
                length = struct.unpack(">H", self._exactly(2))[0]
            elif length == 127:
                length = struct.unpack(">Q", self._exactly(8))[0]
            message += self._exactly(length)
            if first & 0x80:  # FIN
                return message.decode()

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        self._send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            answer = json.loads(self._receive())
            if answer.get("id") == self.next_id:
                assert "error" not in answer, answer
                return answer["result"]  # type: ignore[no-any-return]

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result["result"].get("value")

    def close(self) -> None:
        self.sock.close()


def _split_ws(url: str) -> tuple[str, int, str]:
    rest = url.removeprefix("ws://")
    address, _, path = rest.partition("/")
    host, _, port = address.rpartition(":")
    return host, int(port), "/" + path


SEEN_PATHS: list[str] = []  # every request line the gateway served: what an access log holds


@pytest.fixture
def gateway(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("MODEL_COOLDOWN_ENABLED", "true")
    monkeypatch.setenv("MODEL_COOLDOWN_STATUS_TOKEN", TOKEN)
    monkeypatch.setenv(BASE, KEYS[0])
    monkeypatch.setenv(f"{BASE}_1", KEYS[1])
    monkeypatch.setenv(f"{BASE}_2", KEYS[2])
    CredentialPool.record(P, KEYS[1], 429, model="gpt-4o", retry_after_seconds=90)
    CredentialPool.record(P, KEYS[2], 401, model="gpt-4o")
    app = Flask("page")
    app.config["MODEL_COOLDOWN_STATUS_MODELS"] = ["gpt-4o", "gpt-4o-mini", "o3-catalog"]
    init_app(app)
    app.register_blueprint(status_blueprint())
    SEEN_PATHS.clear()
    app.before_request(lambda: SEEN_PATHS.append(request.full_path) and None)
    server = make_server("127.0.0.1", 0, app, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/cooldown/"
    server.shutdown()
    server.server_close()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[DevTools]:
    assert CHROMIUM is not None
    profile = tmp_path / "profile"
    process = subprocess.Popen(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--remote-debugging-port=0",
            "--window-size=1100,900",
            f"--user-data-dir={profile}",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not (port_file.exists() and port_file.read_text().strip()):
            assert time.monotonic() < deadline, "Chromium did not open DevTools"
            time.sleep(0.05)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as answer:
            targets = json.load(answer)
        page = next(target for target in targets if target["type"] == "page")
        devtools = DevTools(page["webSocketDebuggerUrl"])
        yield devtools
        devtools.close()
    finally:
        process.kill()
        process.wait(timeout=30)


def wait_for(devtools: DevTools, expression: str, seconds: float = 20) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = devtools.evaluate(expression)
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {expression}")


TYPE_INTO = """
(() => {
  const input = document.getElementById(%(id)s);
  input.focus();
  input.value = %(text)s;
  input.dispatchEvent(new Event("input", {bubbles: true}));
  return true;
})()
"""

TABLE = """
[...document.querySelectorAll("#keys tbody tr")].map(
  (row) => [...row.children].map((cell) => cell.textContent))
"""


def look_up_gpt_4o(browser: DevTools, gateway: str) -> None:
    """Open the page, type the token, the provider and gpt-4o, and press Look up."""
    browser.call("Page.enable")
    browser.call("Page.navigate", url=gateway)
    wait_for(browser, "document.readyState === 'complete' && !!document.getElementById('token')")
    for field, text in (("token", TOKEN), ("provider", P), ("model", "gpt-4o")):
        browser.evaluate(TYPE_INTO % {"id": json.dumps(field), "text": json.dumps(text)})
    browser.evaluate("document.querySelector('button[type=submit]').click()")


def test_the_page_shows_each_key_and_why(gateway: str, browser: DevTools, tmp_path: Path) -> None:
    look_up_gpt_4o(browser, gateway)
    rows = wait_for(
        browser, f"(() => {{ const r = {TABLE}; return r.length === 3 ? r : null; }})()"
    )
    assert rows[0] == ["Key 1", "ready", "\u2014", "\u2014", "0"]
    assert rows[1][:3] == ["Key 2", "cooling", "scope"]
    assert 85 <= int(rows[1][3].removesuffix(" s")) <= 90
    assert rows[2][:3] == ["Key 3", "cooling", "credential"]
    title = browser.evaluate("document.getElementById('keys-title').textContent")
    assert title == f"Keys of {P}: 1 ready, 2 cooling, 0 cooling for some models"  # ready ones
    counters = browser.evaluate("document.getElementById('counters').textContent")
    assert "live_observations" in counters
    screenshot = browser.call("Page.captureScreenshot", format="png")["data"]
    (tmp_path / "status-page.png").write_bytes(base64.b64decode(screenshot))
    page_text = browser.evaluate("document.body.innerText")
    assert not any(key in page_text for key in KEYS)
    assert SEEN_PATHS
    assert not [path for path in SEEN_PATHS if "gpt-4o" in path]  # names went in POST bodies


def test_a_key_out_of_quota_is_named_plainly(gateway: str, browser: DevTools) -> None:
    CredentialPool.record(P, KEYS[0], 402, model="another model", outcome=QUOTA_SPENT)
    look_up_gpt_4o(browser, gateway)
    rows = wait_for(
        browser, f"(() => {{ const r = {TABLE}; return r.length === 3 ? r : null; }})()"
    )
    assert rows[0][:3] == [
        "Key 1",
        "cooling",
        "out of quota (credit or a daily limit): add credit, or clear it after topping up",
    ]
    assert 3595 <= int(rows[0][3].removesuffix(" s")) <= 3600  # for every model, an hour
    page_text = browser.evaluate("document.body.innerText")
    assert "the key and its account cool for every model" in page_text  # the legend
    assert KEYS[0] not in page_text


MATRIX = """
(() => {
  if (document.getElementById("matrix-section").hidden) return null;
  const head = [...document.querySelectorAll("#matrix thead th")].map((c) => c.textContent);
  const rows = [...document.querySelectorAll("#matrix tbody tr")].map(
    (row) => [...row.children].map((cell) => cell.textContent));
  return rows.length === 3 ? {head, rows} : null;
})()
"""


def look_up_the_matrix(browser: DevTools, gateway: str) -> Any:
    """Open the page, type the token and the provider (no model), and read the matrix."""
    browser.call("Page.enable")
    browser.call("Page.navigate", url=gateway)
    wait_for(browser, "document.readyState === 'complete' && !!document.getElementById('token')")
    for field, text in (("token", TOKEN), ("provider", P)):
        browser.evaluate(TYPE_INTO % {"id": json.dumps(field), "text": json.dumps(text)})
    browser.evaluate("document.querySelector('button[type=submit]').click()")
    return wait_for(browser, MATRIX)


def test_the_page_shows_the_catalog_matrix(gateway: str, browser: DevTools, tmp_path: Path) -> None:
    matrix = look_up_the_matrix(browser, gateway)
    assert matrix["head"] == [
        "Key",
        "gpt-4o (1 ready)",
        "gpt-4o-mini (2 ready)",
        "o3-catalog (2 ready)",
    ]
    assert matrix["rows"][0] == ["Key 1", "ready", "ready", "ready"]
    assert matrix["rows"][1][0] == "Key 2"
    assert matrix["rows"][1][1].startswith("scope, ")
    assert matrix["rows"][1][2:] == ["ready", "ready"]
    assert [cell.split(",")[0] for cell in matrix["rows"][2][1:]] == ["credential"] * 3
    summary = browser.evaluate("document.getElementById('keys-title').textContent")
    assert summary == f"Keys of {P}: 2 ready, 1 cooling, 1 cooling for some models"
    screenshot = browser.call("Page.captureScreenshot", format="png")["data"]
    (tmp_path / "status-matrix.png").write_bytes(base64.b64decode(screenshot))
    shots = os.environ.get("MODEL_COOLDOWN_SCREENSHOTS")
    if shots:  # keep the artifact where a person can look at it
        (Path(shots) / "status-matrix.png").write_bytes(base64.b64decode(screenshot))


def test_a_wrong_token_shows_a_refusal(gateway: str, browser: DevTools) -> None:
    browser.call("Page.navigate", url=gateway)
    wait_for(browser, "document.readyState === 'complete' && !!document.getElementById('token')")
    browser.evaluate(TYPE_INTO % {"id": json.dumps("token"), "text": json.dumps("x" * 40)})
    browser.evaluate("document.querySelector('button[type=submit]').click()")
    message = wait_for(
        browser,
        "(() => { const m = document.getElementById('message');"
        " return m.className === 'error' ? m.textContent : null; })()",
    )
    assert message == "The status token was refused."


def test_the_page_leads_with_where_clients_get_429_and_keeps_the_token_for_the_tab(
    gateway: str, browser: DevTools, tmp_path: Path
) -> None:
    CredentialPool.record(P, KEYS[0], 429, model="gpt-4o", retry_after_seconds=90)  # all three
    browser.call("Page.enable")
    browser.call("Page.navigate", url=gateway)
    wait_for(browser, "document.readyState === 'complete' && !!document.getElementById('token')")
    browser.evaluate(TYPE_INTO % {"id": json.dumps("token"), "text": json.dumps(TOKEN)})
    browser.evaluate("document.querySelector('button[type=submit]').click()")  # no model typed
    now = wait_for(
        browser,
        "(() => { const t = document.getElementById('now-list').innerText;"
        " return t.includes('429 there') ? t : null; })()",
    )
    assert now == f"{P}: every key cools for 1 model, so clients get 429 there: gpt-4o"
    first = browser.evaluate(
        "[...document.body.children].filter((e) => e.tagName !== 'SCRIPT')"
        ".map((e) => e.id || e.tagName)[1]"
    )
    assert first == "now"  # the first thing under the title
    screenshot = base64.b64decode(browser.call("Page.captureScreenshot", format="png")["data"])
    (tmp_path / "status-clients-get-429.png").write_bytes(screenshot)
    shots = os.environ.get("MODEL_COOLDOWN_SCREENSHOTS")
    if shots:
        (Path(shots) / "status-clients-get-429.png").write_bytes(screenshot)
    assert browser.evaluate("document.cookie") == ""
    browser.call("Page.reload")  # the same tab: the token is kept, nothing typed again
    wait_for(
        browser,
        "document.readyState === 'complete' &&"
        " document.getElementById('now-list').innerText.includes('429 there')",
    )
    browser.evaluate(
        f"sessionStorage.setItem('model-cooldown-status-token', {json.dumps('x' * 40)})"
    )
    browser.call("Page.reload")  # a refused token is forgotten
    wait_for(browser, "document.getElementById('message').textContent.includes('refused')")
    assert browser.evaluate("sessionStorage.getItem('model-cooldown-status-token')") is None
    assert not any(path.startswith("/cooldown/?") and TOKEN in path for path in SEEN_PATHS)


CLICK = (
    "document.querySelector('#key-actions tr[data-label=\"{}\"] button:nth-of-type({})').click()"
)
"""Click a key's Drain (1), Undrain (2) or Clear (3) button."""

ACTIONS = """
(() => {
  const rows = [...document.querySelectorAll("#key-actions tbody tr")];
  return rows.length === 3 ? rows.map((row) => ({
    label: row.dataset.label,
    state: row.children[2].textContent,
    buttons: [...row.querySelectorAll("button")].map(
      (b) => b.textContent + (b.disabled ? "-" : "")),
  })) : null;
})()
"""


def test_the_drain_button_takes_a_key_out_and_undrain_puts_it_back(
    gateway: str, browser: DevTools, tmp_path: Path
) -> None:
    look_up_gpt_4o(browser, gateway)
    rows = wait_for(browser, ACTIONS)
    assert [row["buttons"] for row in rows] == [["Drain", "Undrain-", "Clear"]] * 3
    label = rows[0]["label"]
    assert label == CredentialPool.status(P)["keys"][0]["label"]
    browser.evaluate(CLICK.format(label, 1))
    drained = wait_for(
        browser,
        f"(() => {{ const r = {ACTIONS}; return r && r[0].state === 'drained' ? r : null; }})()",
    )
    assert drained[0]["buttons"] == ["Drain-", "Undrain", "Clear"]
    assert CredentialPool.available(P, model="gpt-4o-mini") == [KEYS[1]]  # out for every model
    title = browser.evaluate("document.getElementById('keys-title').textContent")
    assert title == f"Keys of {P}: 0 ready, 2 cooling, 1 drained, 0 cooling for some models"
    screenshot = browser.call("Page.captureScreenshot", format="png")["data"]
    (tmp_path / "status-drained.png").write_bytes(base64.b64decode(screenshot))
    shots = os.environ.get("MODEL_COOLDOWN_SCREENSHOTS")
    if shots:
        (Path(shots) / "status-drained.png").write_bytes(base64.b64decode(screenshot))
    browser.evaluate(CLICK.format(label, 2))
    wait_for(browser, f"(() => {{ const r = {ACTIONS}; return r && r[0].state === 'ready'; }})()")
    assert CredentialPool.available(P, model="gpt-4o-mini") == KEYS[:2]  # key 3: its auth rest


def test_the_clear_button_forgets_the_cooldown_of_the_model_looked_up(
    gateway: str, browser: DevTools
) -> None:
    look_up_gpt_4o(browser, gateway)
    rows = wait_for(browser, ACTIONS)
    assert rows[1]["state"] == "cooling"  # key 2: throttled for gpt-4o
    browser.evaluate(CLICK.format(rows[1]["label"], 3))
    wait_for(browser, f"(() => {{ const r = {ACTIONS}; return r && r[1].state === 'ready'; }})()")
    done = f"Key 2 ({rows[1]['label']}): clear done; now ready."
    assert browser.evaluate("document.getElementById('action-result').textContent") == done
    assert CredentialPool.available(P, model="gpt-4o") == KEYS[:2]  # key 3's auth rest stays
    browser.evaluate("refresh()")  # what the page does every 5 seconds
    wait_for(browser, "document.getElementById('message').textContent.startsWith('Updated')")
    assert browser.evaluate("document.getElementById('action-result').textContent") == done


def test_a_drained_key_reads_drained_in_the_matrix(gateway: str, browser: DevTools) -> None:
    CredentialPool.drain(P, CredentialPool.status(P)["keys"][0]["label"])
    matrix = look_up_the_matrix(browser, gateway)
    assert matrix["rows"][0] == ["Key 1", "drained", "drained", "drained"]
    assert not any("null" in cell for row in matrix["rows"] for cell in row)


class Answer:
    status_code, headers = 200, {}


def test_a_declared_day_window_half_used_shows_as_a_bar(
    gateway: str, browser: DevTools, tmp_path: Path
) -> None:
    CredentialPool.register(P, BASE, limits={"requests": {"day": 4}})
    try:
        for _ in range(2):  # key 1 is the one ready for gpt-4o
            CredentialPool.dispatch(P, lambda key: Answer(), model="gpt-4o")
        look_up_gpt_4o(browser, gateway)
        bars = wait_for(
            browser,
            """(() => {
              const bars = [...document.querySelectorAll("#keys tbody tr td .window")];
              return bars.length === 3 ? bars.map((bar) => [
                bar.querySelector("meter").value, bar.querySelector("meter").max,
                bar.textContent]) : null;
            })()""",
        )
        screenshot = browser.call("Page.captureScreenshot", format="png")["data"]
        (tmp_path / "status-page-limits.png").write_bytes(base64.b64decode(screenshot))
    finally:
        CredentialPool.register(P, BASE)
    assert bars[0][:2] == [2, 4]
    assert bars[0][2].startswith("requests per day: 2 of 4, resets in ")
    assert [bar[:2] for bar in bars[1:]] == [[0, 4], [0, 4]]
    head = browser.evaluate("document.getElementById('windows-head').hidden")
    assert head is False

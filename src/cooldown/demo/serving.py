"""Serve a demo app on loopback and say where, so scripts and tests can find the port."""

from __future__ import annotations

import sys

from flask import Flask
from werkzeug.serving import make_server


def serve(app: Flask, host: str, port: int, banner: list[str]) -> None:
    """Bind (port 0 picks a free one), print the URL and `banner`, then serve until killed."""
    server = make_server(host, port, app, threaded=True)
    url = f"http://{host}:{server.server_port}"
    print(f"Serving on {url}", flush=True)
    for line in banner:
        print(line.replace("{url}", url), flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        sys.exit(0)

"""The demo gateway for a WSGI server: `gunicorn 'cooldown.demo.wsgi:app'`.

It calls the OpenAI-compatible upstream in `COOLDOWN_DEMO_UPSTREAM` (a base URL such as
`http://127.0.0.1:8090/v1`) with the keys in `COOLDOWN_DEMO_API_KEY`, `..._1`, ...; every
MODEL_COOLDOWN_* setting applies as usual (the flag defaults to on here, as in the demo).
"""

from __future__ import annotations

import os

from ..config import ENABLED_ENV
from .gateway import DemoConfig, create_app, http_dispatch

os.environ.setdefault(ENABLED_ENV, "true")
app = create_app(DemoConfig(http_dispatch(os.environ["COOLDOWN_DEMO_UPSTREAM"])))

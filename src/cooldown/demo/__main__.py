"""`python -m cooldown.demo`: start the demo gateway."""

from __future__ import annotations

import argparse
import os

from ..config import ENABLED_ENV, STATUS_TOKEN_ENV
from ..web.status import MIN_TOKEN_LENGTH
from .gateway import KEYS_ENV, DemoConfig, create_app, http_dispatch, simulated_dispatch
from .serving import serve
from .upstream import SimulatedUpstream

SIMULATED_KEYS = ("demo-key-1", "demo-key-2", "demo-key-3")


def _bucket(text: str) -> tuple[str, str]:
    model, separator, bucket = text.partition("=")
    if not separator or not model or not bucket:
        raise argparse.ArgumentTypeError("expected MODEL=BUCKET")
    return model, bucket


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m cooldown.demo",
        description=(
            "A demo OpenAI-style gateway that rotates upstream keys with model-cooldown. "
            "By default it calls an embedded simulated upstream; MODEL_COOLDOWN_ENABLED "
            "defaults to true here."
        ),
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback)")
    parser.add_argument("--port", type=int, default=8080, help="port to bind; 0 picks a free one")
    parser.add_argument(
        "--upstream",
        metavar="BASE_URL",
        help="a real OpenAI-compatible base URL (e.g. https://host/v1) instead of the simulator",
    )
    parser.add_argument(
        "--keys-env",
        default=KEYS_ENV,
        metavar="NAME",
        help=f"keys come from NAME, NAME_1, NAME_2, ... (default: {KEYS_ENV})",
    )
    parser.add_argument(
        "--timeout", type=float, default=30.0, help="seconds to wait for the upstream"
    )
    parser.add_argument(
        "--quota", type=int, default=3, help="simulator: requests per key and model per window"
    )
    parser.add_argument("--window", type=float, default=20.0, help="simulator: window in seconds")
    parser.add_argument(
        "--revoked-key", action="store_true", help="simulator: the last demo key answers 401"
    )
    parser.add_argument(
        "--cors-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="allow this browser origin (repeatable; '*' allows any)",
    )
    parser.add_argument(
        "--bucket",
        action="append",
        default=[],
        type=_bucket,
        metavar="MODEL=BUCKET",
        help="models sharing one upstream quota (repeatable)",
    )
    parser.add_argument(
        "--error-format",
        choices=("openai", "anthropic", "cooldown"),
        default="openai",
        help="the body of the gateway's own 429/503 (default: openai, what OpenAI SDKs parse)",
    )
    parser.add_argument(
        "--rate-limit-headers",
        action="store_true",
        help="simulator: announce each window as OpenAI does, so keys cool before a 429",
    )
    parser.add_argument(
        "--status-token",
        default=os.environ.get(STATUS_TOKEN_ENV),
        metavar="TOKEN",
        help=f"turn on the status page at /cooldown/ (32+ characters; or {STATUS_TOKEN_ENV})",
    )
    args = parser.parse_args(argv)
    if args.status_token and len(args.status_token) < MIN_TOKEN_LENGTH:
        parser.error(f"--status-token must be at least {MIN_TOKEN_LENGTH} characters")

    os.environ.setdefault(ENABLED_ENV, "true")
    if args.upstream:
        dispatch = http_dispatch(args.upstream, timeout=args.timeout)
    else:
        os.environ.setdefault(args.keys_env, SIMULATED_KEYS[0])
        for number, key in enumerate(SIMULATED_KEYS[1:], start=1):
            os.environ.setdefault(f"{args.keys_env}_{number}", key)
        revoked = frozenset({SIMULATED_KEYS[-1]}) if args.revoked_key else frozenset()
        simulator = SimulatedUpstream(
            args.quota, args.window, revoked, rate_limit_headers=args.rate_limit_headers
        )
        dispatch = simulated_dispatch(simulator)
    config = DemoConfig(
        dispatch=dispatch,
        keys_env=args.keys_env,
        cors_origins=frozenset(args.cors_origin),
        quota_buckets={"demo": dict(args.bucket)} if args.bucket else {},
        error_format=args.error_format,
        status_token=args.status_token,
    )
    banner = [
        f"Model cooldown enabled: {os.environ[ENABLED_ENV]}",
        "Try it (repeat to see X-Upstream-Key-Index rotate, then a 429 with Retry-After):",
        "  curl -i {url}/v1/chat/completions -H 'Content-Type: application/json' "
        '-d \'{"model": "gpt-demo", "messages": [{"role": "user", "content": "hi"}]}\'',
        'Streaming: add "stream": true to the body (curl -N to see the events arrive).',
    ]
    if args.status_token:
        banner.append("Status page: {url}/cooldown/ (enter the status token)")
    else:
        banner.append("Status page: off; start with --status-token to turn it on")
    serve(create_app(config), args.host, args.port, banner)


if __name__ == "__main__":
    main()

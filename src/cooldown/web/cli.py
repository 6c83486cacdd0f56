"""`flask cooldown status`, `drain`, `undrain`, `clear`: from where the state really is."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import click
from flask.cli import AppGroup

from ..config import STATUS_TOKEN_ENV, settings
from ..pools.actions import KEY_ACTIONS, KeyAction
from .summary import Pools, app_pools, overview

__all__ = ["cooldown_cli"]

cooldown_cli = AppGroup("cooldown", help="Model cooldown state.")

NOWHERE = (
    "Cooldowns live in each server process: this new process knows none of them. Turn on "
    "Redis sharing (MODEL_COOLDOWN_REDIS_URL) to read the shared state, or pass "
    "--url http://HOST:PORT/cooldown and a status token to ask a running gateway."
)


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """urllib copies `Authorization` onto a redirect, to any origin: the token would go
    there. A status URL that redirects is the wrong URL; say so instead."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_opener = urllib.request.build_opener(_NoRedirects)


def _shared_pools() -> Pools:
    """The app's pools, when their state is somewhere this new process can reach."""
    current = settings()
    if not (current.enabled and current.redis_url):
        raise click.ClickException(NOWHERE)
    return app_pools()


def _from_gateway(url: str, token: str | None, path: str, body: dict[str, Any] | None) -> Any:
    """GET (or POST, for a model lookup or an action) a running gateway's status JSON;
    never following a redirect, so the token goes to the URL given and nowhere else."""
    token = token or os.environ.get(STATUS_TOKEN_ENV)
    if not token:
        raise click.UsageError(f"--url needs --token or {STATUS_TOKEN_ENV}")
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url.rstrip("/") + path,
        data=data,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="GET" if body is None else "POST",
    )
    try:
        with _opener.open(request, timeout=10) as answer:
            return json.load(answer)
    except urllib.error.HTTPError as error:
        if 300 <= error.code < 400:
            error.close()
            raise click.ClickException(
                f"the gateway answered HTTP {error.code} (a redirect): not followed, so the "
                "token is not sent elsewhere; pass the final status URL"
            ) from None
        said = _message(error)
        error.close()
        raise click.ClickException(f"the gateway answered HTTP {error.code}{said}") from None
    except urllib.error.URLError as error:
        reason = error.reason
        why = reason.strerror if isinstance(reason, OSError) and reason.strerror else None
        raise click.ClickException(
            f"the gateway could not be reached ({why or type(reason).__name__})"
        ) from None
    except (OSError, ValueError) as error:
        raise click.ClickException(
            f"the gateway could not be read ({type(error).__name__})"
        ) from None


def _message(error: urllib.error.HTTPError) -> str:
    """The gateway's own words (`{"message": ...}` in its JSON error), as ": ..."; "" when
    it sent none (a proxy's HTML page, say)."""
    try:
        body = json.loads(error.read(4096) or b"null")
    except (OSError, ValueError):
        return ""
    message = body.get("message") if isinstance(body, dict) else None
    return f": {message}" if isinstance(message, str) and message.isprintable() else ""


@cooldown_cli.command("status")
@click.argument("provider", required=False)
@click.option("--model", default=None, help="the upstream model to look up")
@click.option("--bucket", default=None, help="the configured quota bucket to look up")
@click.option(
    "--url", default=None, help="a running gateway's status prefix, e.g. http://h:8080/cooldown"
)
@click.option("--token", default=None, help=f"the status token (default: {STATUS_TOKEN_ENV})")
def status_command(
    provider: str | None,
    model: str | None,
    bucket: str | None,
    url: str | None,
    token: str | None,
) -> None:
    """Counters, or PROVIDER's keys by position: ready or cooling, why, for how long."""
    if url is not None:
        path = "/status" if provider is None else "/status/" + urllib.parse.quote(provider, "")
        lookup = None if provider is None else {"model": model, "quota_bucket": bucket}
        click.echo(json.dumps(_from_gateway(url, token, path, lookup), indent=2))
        return
    pools = _shared_pools()
    if provider is None:
        click.echo(json.dumps(overview(pools), indent=2))
        return
    if not pools.pooled(provider):
        raise click.BadParameter("no such provider is registered", param_hint="PROVIDER")
    click.echo(json.dumps(pools.status(provider, model=model, quota_bucket=bucket), indent=2))


def _act(
    action: str,
    provider: str,
    label: str,
    scope: dict[str, str],
    url: str | None,
    token: str | None,
) -> None:
    """Drain, undrain or clear one key, on a running gateway (`--url`) or in the shared
    state; echo the key's new status row."""
    if url is not None:
        path = "/keys/{}/{}/{}".format(
            urllib.parse.quote(provider, ""), urllib.parse.quote(label, ""), action
        )
        click.echo(json.dumps(_from_gateway(url, token, path, scope), indent=2))
        return
    pools = _shared_pools()
    if not pools.pooled(provider):
        raise click.BadParameter("no such provider is registered", param_hint="PROVIDER")
    try:
        row = getattr(pools, action)(provider, label, **scope)
    except KeyError:
        raise click.BadParameter(
            "no key of this provider has that label", param_hint="LABEL"
        ) from None
    click.echo(json.dumps(row, indent=2))


_URL = click.option("--url", default=None, help="a running gateway's status prefix")
_TOKEN = click.option(
    "--token", default=None, help=f"the status token (default: {STATUS_TOKEN_ENV})"
)


def _key_command(action: KeyAction) -> None:
    """`flask cooldown <action> PROVIDER LABEL`: one key, by its label; a scoped action
    (a clear) also takes `--model` or `--bucket`."""

    @click.argument("provider")
    @click.argument("label")
    @_URL
    @_TOKEN
    def command(
        provider: str,
        label: str,
        url: str | None,
        token: str | None,
        model: str | None = None,
        bucket: str | None = None,
    ) -> None:
        given = (("model", model), ("quota_bucket", bucket))
        scope = {name: value for name, value in given if value}
        _act(action.name, provider, label, scope, url, token)

    if action.scoped:
        command = click.option("--bucket", default=None, help="this quota bucket's state only")(
            command
        )
        command = click.option("--model", default=None, help="this model's state only")(command)
    cooldown_cli.command(action.name, help=action.help)(command)


for _action in KEY_ACTIONS:
    _key_command(_action)

"""`flask cooldown status`: the status JSON in a terminal, for an operator with a shell."""

from __future__ import annotations

import json

import click
from flask.cli import AppGroup

from ..pools import CredentialPool
from .status import overview

__all__ = ["cooldown_cli"]

cooldown_cli = AppGroup("cooldown", help="Model cooldown state.")


@cooldown_cli.command("status")
@click.argument("provider", required=False)
@click.option("--model", default=None, help="the upstream model to look up")
@click.option("--bucket", default=None, help="the configured quota bucket to look up")
def status_command(provider: str | None, model: str | None, bucket: str | None) -> None:
    """Counters, or PROVIDER's keys by position: ready or cooling, why, for how long."""
    if provider is None:
        click.echo(json.dumps(overview(), indent=2))
        return
    if not CredentialPool.pooled(provider):
        raise click.BadParameter("no such provider is registered", param_hint="PROVIDER")
    click.echo(
        json.dumps(CredentialPool.status(provider, model=model, quota_bucket=bucket), indent=2)
    )

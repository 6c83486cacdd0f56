"""Per-model cooldowns for rotating upstream LLM API keys in Flask, Quart and FastAPI gateways."""

from __future__ import annotations

from .config import FORWARDED_ENV, CooldownSettings, settings
from .errors import (
    APIError,
    CooldownError,
    ModelCooldownCapacity,
    ModelCooldownExhausted,
    NanoGPTKeyPoolExhausted,
)
from .evidence import (
    QUOTA_SPENT,
    QuotaSpent,
    RecordingContext,
    SelectionScope,
    UpstreamOutcome,
    classify_upstream_outcome,
    google_quota_spent,
    google_retry_delay,
    rate_limit_advice,
    recording_context,
    retry_after_seconds,
    selection_scope,
    upstream_model,
)
from .evidence.usage import Usage
from .pools import (
    CredentialPool,
    KeyedClients,
    NanoGPTKeyPool,
    NanoGPTUnifiedKeyPool,
    configured_nanogpt_keys,
    is_nanogpt_credential_rejection,
)
from .store import MAX_ENTRIES, ModelCooldown, model_cooldown
from .web import (
    api_error_response,
    arelay,
    cooldown_error_response,
    init_app,
    relay,
    status_blueprint,
)

__version__ = "0.5.0"

__all__ = [  # noqa: RUF022 -- grouped by purpose, the gateway path first
    # the gateway path: pool keys, send through them, answer the client
    "CredentialPool",
    "KeyedClients",
    "init_app",
    "relay",
    "arelay",
    "status_blueprint",
    "upstream_model",
    # quotas beyond the minute: a usage reader's reading (readers in cooldown.usage)
    "Usage",
    # what a route may raise or let through
    "CooldownError",
    "ModelCooldownExhausted",
    "ModelCooldownCapacity",
    "APIError",
    "api_error_response",
    "cooldown_error_response",
    # settings
    "settings",
    "CooldownSettings",
    "FORWARDED_ENV",
    # the store, for select/record by hand
    "ModelCooldown",
    "model_cooldown",
    "MAX_ENTRIES",
    # evidence helpers (also in cooldown.evidence)
    "RecordingContext",
    "SelectionScope",
    "UpstreamOutcome",
    "classify_upstream_outcome",
    "google_quota_spent",
    "google_retry_delay",
    "QuotaSpent",
    "QUOTA_SPENT",
    "rate_limit_advice",
    "recording_context",
    "retry_after_seconds",
    "selection_scope",
    # NanoGPT's validated pools
    "NanoGPTKeyPool",
    "NanoGPTUnifiedKeyPool",
    "NanoGPTKeyPoolExhausted",
    "configured_nanogpt_keys",
    "is_nanogpt_credential_rejection",
]

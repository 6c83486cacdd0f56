"""Per-model cooldowns for rotating upstream LLM API keys in Flask gateways."""

from __future__ import annotations

from .config import FORWARDED_ENV, CooldownSettings, settings
from .errors import APIError, CooldownError, ModelCooldownCapacity, ModelCooldownExhausted
from .evidence.advice import (
    RecordingContext,
    SelectionScope,
    recording_context,
    retry_after_seconds,
    selection_scope,
    upstream_model,
)
from .evidence.bodies import google_retry_delay
from .evidence.outcome import UpstreamOutcome, classify_upstream_outcome
from .evidence.ratelimit import rate_limit_advice
from .pools import (
    CredentialPool,
    KeyedClients,
    NanoGPTKeyPool,
    NanoGPTKeyPoolExhausted,
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

__all__ = [
    "FORWARDED_ENV",
    "MAX_ENTRIES",
    "APIError",
    "CooldownError",
    "CooldownSettings",
    "CredentialPool",
    "KeyedClients",
    "ModelCooldown",
    "ModelCooldownCapacity",
    "ModelCooldownExhausted",
    "NanoGPTKeyPool",
    "NanoGPTKeyPoolExhausted",
    "NanoGPTUnifiedKeyPool",
    "RecordingContext",
    "SelectionScope",
    "UpstreamOutcome",
    "api_error_response",
    "arelay",
    "classify_upstream_outcome",
    "configured_nanogpt_keys",
    "cooldown_error_response",
    "google_retry_delay",
    "init_app",
    "is_nanogpt_credential_rejection",
    "model_cooldown",
    "rate_limit_advice",
    "recording_context",
    "relay",
    "retry_after_seconds",
    "selection_scope",
    "settings",
    "status_blueprint",
    "upstream_model",
]

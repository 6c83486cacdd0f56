"""Key pools that pick an upstream key per request and learn from each attempt."""

from __future__ import annotations

from .credential import CredentialPool
from .keyed_clients import KeyedClients
from .nanogpt import (
    NanoGPTKeyPool,
    NanoGPTKeyPoolExhausted,
    NanoGPTUnifiedKeyPool,
    configured_nanogpt_keys,
    is_nanogpt_credential_rejection,
)

__all__ = [
    "CredentialPool",
    "KeyedClients",
    "NanoGPTKeyPool",
    "NanoGPTKeyPoolExhausted",
    "NanoGPTUnifiedKeyPool",
    "configured_nanogpt_keys",
    "is_nanogpt_credential_rejection",
]

"""The secret envelope: an API key sealed with AES-GCM, bound to a run id and an expiry.

The key never travels or rests in clear: the API seals it into the run message under the service key
(`MCPEVAL_SECRET_KEY`, 32 random bytes, base64) and only a worker holding the same key can open it, for
that run id only, before it expires.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import time

import msgspec
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

_NONCE_BYTES = 12
_BASE64 = re.compile(r"[A-Za-z0-9+/_-]+={0,2}")
_VERSION = b"v1"


class EnvelopeError(ValueError):
    """A sealed key could not be opened: wrong key, wrong run, tampered, or expired."""


class _Sealed(msgspec.Struct):
    key: str
    expires_at: float


def generate_service_key() -> str:
    """A fresh service key in the form MCPEVAL_SECRET_KEY expects."""
    return base64.urlsafe_b64encode(os.urandom(32)).decode()


def load_service_key(encoded: str) -> bytes:
    """Decode and check a service key (32 bytes, urlsafe or standard base64)."""
    text = encoded.strip()
    if not _BASE64.fullmatch(text):
        raise EnvelopeError("MCPEVAL_SECRET_KEY is not valid base64")
    try:
        raw = base64.urlsafe_b64decode(text.replace("+", "-").replace("/", "_") + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise EnvelopeError("MCPEVAL_SECRET_KEY is not valid base64") from None
    if len(raw) != 32:
        raise EnvelopeError("MCPEVAL_SECRET_KEY must decode to 32 bytes")
    return raw


def seal(service_key: bytes, run_id: str, api_key: str, ttl_seconds: float, now: float | None = None) -> str:
    """Seal api_key for run_id until now + ttl_seconds; returns a compact ASCII token."""
    issued = time.time() if now is None else now
    nonce = os.urandom(_NONCE_BYTES)
    plaintext = msgspec.json.encode(_Sealed(key=api_key, expires_at=issued + ttl_seconds))
    ciphertext = AESGCM(service_key).encrypt(nonce, plaintext, _VERSION + run_id.encode())
    return base64.urlsafe_b64encode(_VERSION + nonce + ciphertext).decode()


def open_sealed(service_key: bytes, run_id: str, token: str, now: float | None = None) -> str:
    """Return the api key sealed in token, or raise EnvelopeError (tampered, other run, expired)."""
    try:
        blob = base64.urlsafe_b64decode(token.encode())
    except (binascii.Error, ValueError):
        raise EnvelopeError("sealed key is not valid base64") from None
    if not blob.startswith(_VERSION) or len(blob) < len(_VERSION) + _NONCE_BYTES + 16:
        raise EnvelopeError("sealed key has an unknown format")
    nonce = blob[len(_VERSION) : len(_VERSION) + _NONCE_BYTES]
    try:
        plaintext = AESGCM(service_key).decrypt(
            nonce, blob[len(_VERSION) + _NONCE_BYTES :], _VERSION + run_id.encode()
        )
    except InvalidTag:
        raise EnvelopeError("sealed key does not open with this service key for this run") from None
    sealed = msgspec.json.decode(plaintext, type=_Sealed)
    if (time.time() if now is None else now) > sealed.expires_at:
        raise EnvelopeError("sealed key has expired")
    return sealed.key

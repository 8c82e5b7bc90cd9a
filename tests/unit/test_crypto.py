"""The secret envelope (shared.crypto): a sealed key opens only with the service key, for its run id,
before it expires, and never shows the key in clear."""

from __future__ import annotations

import base64
import uuid

import pytest

from shared.crypto import EnvelopeError, generate_service_key, load_service_key, open_sealed, seal

pytestmark = pytest.mark.unit

CANARY = f"sk-canary-{uuid.uuid4().hex}"
RUN_ID = str(uuid.uuid4())
NOW = 1_800_000_000.0


@pytest.fixture
def service_key() -> bytes:
    return load_service_key(generate_service_key())


def test_sealed_key_opens_for_its_run(service_key: bytes) -> None:
    """A sealed key opens with the same service key and run id, before it expires."""
    token = seal(service_key, RUN_ID, CANARY, ttl_seconds=60, now=NOW)

    assert open_sealed(service_key, RUN_ID, token, now=NOW + 59) == CANARY


def test_sealed_key_is_not_in_clear(service_key: bytes) -> None:
    """Neither the token nor its decoded bytes contain the key, and two seals of it differ (fresh nonce)."""
    first = seal(service_key, RUN_ID, CANARY, ttl_seconds=60, now=NOW)
    second = seal(service_key, RUN_ID, CANARY, ttl_seconds=60, now=NOW)

    assert first != second
    for token in (first, second):
        assert CANARY not in token
        assert CANARY.encode() not in base64.urlsafe_b64decode(token)
        assert token.isascii()


def test_sealed_key_does_not_open_for_another_run(service_key: bytes) -> None:
    """The run id is bound as associated data: another run's id cannot open the envelope."""
    token = seal(service_key, RUN_ID, CANARY, ttl_seconds=60, now=NOW)

    with pytest.raises(EnvelopeError, match="this run"):
        open_sealed(service_key, str(uuid.uuid4()), token, now=NOW)


def test_sealed_key_does_not_open_after_expiry(service_key: bytes) -> None:
    """An envelope past its expiry is refused, even with the right key and run id."""
    token = seal(service_key, RUN_ID, CANARY, ttl_seconds=60, now=NOW)

    with pytest.raises(EnvelopeError, match="expired"):
        open_sealed(service_key, RUN_ID, token, now=NOW + 61)


def test_sealed_key_expiry_uses_the_clock_by_default(service_key: bytes) -> None:
    """Without an explicit `now`, sealing and opening use the real clock (a negative ttl is already expired)."""
    assert open_sealed(service_key, RUN_ID, seal(service_key, RUN_ID, CANARY, ttl_seconds=60)) == CANARY
    with pytest.raises(EnvelopeError, match="expired"):
        open_sealed(service_key, RUN_ID, seal(service_key, RUN_ID, CANARY, ttl_seconds=-1))


def test_sealed_key_does_not_open_with_another_service_key(service_key: bytes) -> None:
    """Only a holder of the same service key can open the envelope."""
    token = seal(service_key, RUN_ID, CANARY, ttl_seconds=60, now=NOW)
    other = load_service_key(generate_service_key())

    with pytest.raises(EnvelopeError):
        open_sealed(other, RUN_ID, token, now=NOW)


@pytest.mark.parametrize("position", [2, 10, 20, -1], ids=["nonce", "nonce end", "ciphertext", "tag"])
def test_tampered_envelope_is_refused(service_key: bytes, position: int) -> None:
    """Flipping any byte of the nonce, ciphertext or tag makes the envelope unusable."""
    blob = bytearray(base64.urlsafe_b64decode(seal(service_key, RUN_ID, CANARY, ttl_seconds=60, now=NOW)))
    blob[position] ^= 0x01

    with pytest.raises(EnvelopeError):
        open_sealed(service_key, RUN_ID, base64.urlsafe_b64encode(bytes(blob)).decode(), now=NOW)


@pytest.mark.parametrize(
    ("token", "message"),
    [
        ("not base64 !!", "base64"),
        (base64.urlsafe_b64encode(b"v1short").decode(), "unknown format"),
        (base64.urlsafe_b64encode(b"v9" + bytes(40)).decode(), "unknown format"),
        ("", "unknown format"),
    ],
    ids=["not base64", "too short", "unknown version", "empty"],
)
def test_malformed_envelope_is_refused(service_key: bytes, token: str, message: str) -> None:
    """Tokens that are not envelopes are refused with a reason, never an unexpected exception."""
    with pytest.raises(EnvelopeError, match=message):
        open_sealed(service_key, RUN_ID, token, now=NOW)


def test_service_key_must_be_32_bytes_of_base64() -> None:
    """load_service_key accepts urlsafe or standard base64 of 32 bytes, with or without padding, only."""
    raw = bytes(range(32))
    assert load_service_key(base64.urlsafe_b64encode(raw).decode()) == raw
    assert load_service_key(base64.b64encode(raw).decode().rstrip("=")) == raw
    assert len(load_service_key(generate_service_key())) == 32
    with pytest.raises(EnvelopeError, match="32 bytes"):
        load_service_key(base64.urlsafe_b64encode(bytes(16)).decode())
    with pytest.raises(EnvelopeError, match="not valid base64"):
        load_service_key("a")
    with pytest.raises(EnvelopeError, match="not valid base64"):
        load_service_key("***")  # not base64 at all: said so, not silently decoded to nothing

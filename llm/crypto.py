"""Encryption at rest of provider API keys (Fernet; the key comes from settings, never from the database).

`LLM_KEY_ENCRYPTION_KEY` may list several keys, comma-separated: the first encrypts, all decrypt, so a key can be
rotated by putting the new one first. Without it, a key is derived from SECRET_KEY with HKDF.
"""

from __future__ import annotations

import base64
import functools

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from core.conf import setting


def _fernet_key(secret: str) -> bytes:
    """A Fernet key from any secret string: itself when it already is one, else HKDF-SHA256 of it."""
    try:
        if len(base64.urlsafe_b64decode(secret.encode())) == 32:
            return secret.encode()
    except (ValueError, TypeError):
        pass
    derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=b"agentplat-llm-api-key", info=b"fernet").derive(
        secret.encode()
    )
    return base64.urlsafe_b64encode(derived)


@functools.cache
def _fernet(secrets: tuple[str, ...]) -> MultiFernet:
    return MultiFernet([Fernet(_fernet_key(secret)) for secret in secrets])


def _current() -> MultiFernet:
    configured = setting("LLM_KEY_ENCRYPTION_KEY") or []
    if isinstance(configured, str):
        configured = [part.strip() for part in configured.split(",") if part.strip()]
    secrets = tuple(configured) or (settings.SECRET_KEY,)
    if not all(secrets):
        raise ImproperlyConfigured("LLM_KEY_ENCRYPTION_KEY (or SECRET_KEY) is empty: API keys cannot be encrypted.")
    return _fernet(secrets)


def encrypt(plaintext: str) -> str:
    """The stored form of an API key ("" stays "")."""
    if not plaintext:
        return ""
    return _current().encrypt(plaintext.encode()).decode()


def decrypt(token: str) -> str:
    """The API key back from its stored form; raises ImproperlyConfigured when the settings key cannot read it."""
    if not token:
        return ""
    try:
        return _current().decrypt(token.encode()).decode()
    except InvalidToken as exc:
        raise ImproperlyConfigured(
            "A stored model-provider API key cannot be decrypted with LLM_KEY_ENCRYPTION_KEY (or SECRET_KEY). "
            "Put the old key after the new one in LLM_KEY_ENCRYPTION_KEY, or enter the API key again."
        ) from exc

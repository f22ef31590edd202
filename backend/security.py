"""Secrets: API tokens (random, stored as SHA-256) and passwords (argon2)."""

from __future__ import annotations

import hashlib
import secrets

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

TOKEN_PREFIX = "slaq_"
_hasher = PasswordHasher()


def new_api_token() -> str:
    """A fresh token; only its hash is stored, so it can be shown just once."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    # Tokens are 256-bit random: a fast hash is enough and allows indexed lookup.
    return hashlib.sha256(token.encode()).hexdigest()


def token_display_prefix(token: str) -> str:
    return token[: len(TOKEN_PREFIX) + 6]


def hash_password(password: str) -> str:
    return _hasher.hash(password)


def verify_password(password_hash: str, password: str) -> bool:
    try:
        return _hasher.verify(password_hash, password)
    except (VerificationError, InvalidHashError):
        return False

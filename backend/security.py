"""Secrets: API tokens (random, stored as SHA-256) and passwords (argon2,
with a strength policy)."""

from __future__ import annotations

import hashlib
import secrets
from functools import cache

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


@cache
def _dummy_hash() -> str:
    return _hasher.hash(secrets.token_urlsafe(16))


def verify_password_of(password_hash: str | None, password: str) -> bool:
    """:func:`verify_password`, where ``None`` (no such account, or one that
    may not sign in) is checked against a throwaway hash: both cases cost one
    argon2 verification, so the answer's timing does not tell whether an
    account exists."""
    if password_hash is None:
        verify_password(_dummy_hash(), password)
        return False
    return verify_password(password_hash, password)


MIN_PASSWORD_LENGTH = 10
MIN_PASSWORD_SCORE = 3
"""zxcvbn's 0-4 scale; 3 is "safely unguessable: moderate protection from an
offline slow-hash scenario", which argon2 storage is."""
_ANALYSED_CHARACTERS = 72
"""zxcvbn refuses longer input; a password is at least as strong as its first
72 characters, so judging those alone can only err towards refusing."""


def password_problem(password: str, *, email: str = "") -> str | None:
    """Why ``password`` may not be set (for the account ``email``), or None."""
    # Imported here: its word lists take a while to load, and only the few
    # places that set a password need them.
    from zxcvbn import zxcvbn

    if len(password) < MIN_PASSWORD_LENGTH:
        return f"must be at least {MIN_PASSWORD_LENGTH} characters long"
    email = email.strip().lower()
    local, _, domain = email.partition("@")
    hints = [h for h in (email, local, *domain.split(".")) if h]
    verdict = zxcvbn(password[:_ANALYSED_CHARACTERS], user_inputs=hints)
    if verdict["score"] >= MIN_PASSWORD_SCORE:
        return None
    feedback = verdict["feedback"]
    advice = " ".join(filter(None, [feedback.get("warning"), *feedback.get("suggestions", [])]))
    return "too easy to guess: " + (advice or "use a longer, less predictable password")


def generate_password() -> str:
    """A random password that passes :func:`password_problem`."""
    while True:
        password = secrets.token_urlsafe(15)
        if password_problem(password) is None:
            return password

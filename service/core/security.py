"""API keys: generated once, shown once, stored as sha256 hashes.

Keys are 32 random bytes (urlsafe base64) behind a `kj_` prefix, so a fast unsalted hash is enough:
nobody can brute-force 256 bits, and the hash lets us look a key up with one indexed query.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

KEY_PREFIX = "kj_"


def generate_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def display_prefix(key: str) -> str:
    return key[: len(KEY_PREFIX) + 6]


def same_secret(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode(), expected.encode())

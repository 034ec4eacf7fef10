"""Keeping secrets (CHAP passwords, keys) out of logs and error messages."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Keys whose values are secrets wherever they appear in connection_info.
SECRET_KEYS = frozenset({"auth_password", "discovery_auth_password", "password", "keyring",
                         "secret", "key", "encryption_key", "auth_key", "token"})


def secret_values(info: Any) -> set[str]:
    """Every secret string inside ``info`` (nested mappings and lists included)."""
    found: set[str] = set()
    if isinstance(info, Mapping):
        for key, value in info.items():
            if key in SECRET_KEYS and isinstance(value, str) and value:
                found.add(value)
            else:
                found |= secret_values(value)
    elif isinstance(info, list):
        for item in info:
            found |= secret_values(item)
    return found


def redact(text: str, secrets: set[str]) -> str:
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def without_secrets(info: Any) -> Any:
    """A copy of ``info`` with every secret value replaced by ``***``."""
    if isinstance(info, Mapping):
        return {k: ("***" if k in SECRET_KEYS and v else without_secrets(v))
                for k, v in info.items()}
    if isinstance(info, list):
        return [without_secrets(item) for item in info]
    return info

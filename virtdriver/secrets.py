"""Keeping secrets (CHAP passwords, keys) out of logs and error messages.

Two ways, both here: the secret *values* of a request are known (:func:`secret_values`) and
replaced wherever they appear (:func:`redact`); text from elsewhere (os-brick's messages and
logs, which echo commands such as ``iscsiadm ... -v <password>``) is masked by the patterns of
oslo.utils' ``mask_password`` (:func:`mask`), the masking OpenStack's own services use.
"""

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
    """``text`` with the given secret values and anything that looks like a secret masked."""
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, "***")
    return mask(text)


def mask(text: str) -> str:
    """``text`` with every ``password=...``-like value masked (oslo.utils' patterns: CHAP
    passwords, secrets, tokens, keys in key=value, JSON and command-line forms)."""
    from oslo_utils import strutils  # 0.1 s to import: only where text from outside is shown

    return str(strutils.mask_password(text, secret="***"))


def without_secrets(info: Any) -> Any:
    """A copy of ``info`` with every secret value replaced by ``***``."""
    if isinstance(info, Mapping):
        return {k: ("***" if k in SECRET_KEYS and v else without_secrets(v))
                for k, v in info.items()}
    if isinstance(info, list):
        return [without_secrets(item) for item in info]
    return info

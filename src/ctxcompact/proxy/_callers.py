"""Whose originals a request may read: its store namespace, from every credential it carries.

The proxy keeps what it removes (and the summaries it reuses) per caller, and the only thing
that tells callers apart is what they authenticate with. A namespace is the hash of *every*
credential-bearing part of the request, so two requests share one only when they carry the
same credentials, whichever header or query parameter those travel in:

- every header whose name contains ``auth``, ``key``, ``token``, ``secret``, ``signature``,
  ``credential`` or ``password`` (``Authorization`` whatever its scheme, ``x-api-key``,
  Azure's ``api-key``, Gemini's ``x-goog-api-key``, ``Ocp-Apim-Subscription-Key``,
  ``Proxy-Authorization``, ``x-amz-security-token`` ...), except ``Idempotency-Key``, which
  changes with every request and proves nothing;
- every query parameter named the same way, or ``sig`` (``?key=`` as Gemini clients send it,
  ``?api-key=`` ...).

Names and values go into the hash, never anywhere else. Erring on the side of "credential"
costs at most a caller's summary reuse (a header that changes per request splits its
namespace); it never merges two callers. A request that carries no credential (or an
``Authorization`` with a scheme and nothing after it) gets a fresh random namespace that no
other request can name: its own recall rounds work, nothing is shared.
"""

from __future__ import annotations

import json
import secrets
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl

from ..store._records import credential_namespace

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["caller_namespace", "credential_parts", "is_credential_name"]

_WORDS = ("auth", "key", "token", "secret", "signature", "credential", "password")
_NAMES = frozenset({"sig"})
_NOT_CREDENTIALS = frozenset({"idempotency-key"})
_SCHEME_ONLY = frozenset({"authorization", "proxy-authorization"})


def is_credential_name(name: str) -> bool:
    """Whether a header or query parameter named ``name`` may carry a credential.

    Example:
        >>> [is_credential_name(n) for n in ("api-key", "Authorization", "api-version")]
        [True, True, False]
    """
    lowered = name.lower()
    if lowered in _NOT_CREDENTIALS:
        return False
    return lowered in _NAMES or any(word in lowered for word in _WORDS)


def credential_parts(headers: Iterable[tuple[str, str]], query: str) -> list[tuple[str, str, str]]:
    """``(where, name, value)`` of each credential in the headers and the raw query string,
    sorted; empty values (and an ``Authorization`` scheme without a token) left out."""
    parts: list[tuple[str, str, str]] = []
    for name, value in headers:
        lowered, value = name.lower(), value.strip()
        if lowered in _SCHEME_ONLY and len(value.split(maxsplit=1)) < 2:
            continue  # "Bearer" alone: a scheme, no secret
        if value and is_credential_name(lowered):
            parts.append(("header", lowered, value))
    for name, value in parse_qsl(query, keep_blank_values=True):
        if value and is_credential_name(name):
            parts.append(("query", name, value))
    return sorted(parts)


def caller_namespace(headers: Iterable[tuple[str, str]], query: str = "") -> str:
    """The store namespace of one request: a hash of all its credentials, or, without any,
    a fresh random namespace no other request can reach.

    Args:
        headers: The request's headers as ``(name, value)`` pairs (repeats included).
        query: The raw query string (``a=1&key=...``), without the ``?``.

    Example:
        >>> a = caller_namespace([("x-api-key", "sk-a")])
        >>> a == caller_namespace([("X-Api-Key", "sk-a"), ("user-agent", "x")]), "sk-a" in a
        (True, False)
        >>> caller_namespace([]) == caller_namespace([])
        False
    """
    parts = credential_parts(headers, query)
    if not parts:
        return "anon-" + secrets.token_hex(16)
    return credential_namespace(json.dumps(parts))

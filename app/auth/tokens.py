"""The API token configuration: its format, parsing and validation, and how secrets are hashed.

The configuration lists tokens by the SHA-256 of their secret, never the secret, so the file is not itself a
credential (it can sit in a ConfigMap or a repository). A fast hash is enough because the secrets are random
256-bit strings (``schedlock-server new-token``): slow hashes (bcrypt, argon2) exist to make guessing
*low-entropy passwords* expensive, and nobody enumerates 2**256 candidates however cheap each one is. A slow
hash would only cost every request milliseconds. ``hash-token`` refuses short secrets for that reason.
"""

from __future__ import annotations

import hashlib
import re
from typing import Annotated, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

from app.auth.quotas import Quota
from app.locking.names import NAME_MAX

ALL_NAMES = "*"
# Controls, "/", and lone surrogates (a JSON file can spell one; UTF-8 and so Postgres cannot hold it).
_BAD_PREFIX_CHARS = re.compile(r"[\x00-\x1f\x7f-\x9f/\ud800-\udfff]")
#: Secrets shorter than this are refused by ``hash-token``: a fast hash is only safe for high-entropy secrets.
MIN_SECRET_LENGTH = 32
#: RFC 6750's ``b64token``: what a bearer secret may be. ASCII only; a secret outside it could never be presented.
B64TOKEN = re.compile(r"[A-Za-z0-9._~+/-]+=*", re.ASCII)


class TokenConfigError(ValueError):
    """The token configuration cannot be used; the message says where and why (never a secret)."""


#: A principal's name (a token's, or one a binding makes from a JWT's claims): what ``locked_by`` records.
NAME_RULE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,63}")
TokenName = Annotated[str, StringConstraints(pattern=f"^{NAME_RULE.pattern}$")]


Access = Literal["read", "read-write"]


def check_prefix(prefix: str) -> str:
    """A configured name prefix as it is, or ValueError saying why it can never be one."""
    if prefix == ALL_NAMES:
        return prefix
    if not prefix:
        raise ValueError('an empty prefix is not allowed; write "*" for every name')
    if prefix.endswith("*"):
        raise ValueError(f'prefixes are literal, not globs: write {prefix.rstrip("*")!r}, or "*" alone')
    if len(prefix) > NAME_MAX or _BAD_PREFIX_CHARS.search(prefix):
        raise ValueError(f"{prefix!r} can never match a lock name (1-64 characters, no control chars, no /)")
    return prefix


class Policy(BaseModel):
    """What a principal may do, the same for a token and a binding: names by prefix, read or read-write, admin
    (force-release), and an optional quota (docs/auth.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prefixes: list[str] = Field(min_length=1)
    access: Access
    admin: bool = Field(default=False, description="May force-release locks within its prefixes (docs/history.md).")
    rate: float | None = Field(default=None, gt=0, le=1_000_000, description="Requests per second (a quota).")
    burst: int | None = Field(default=None, ge=1, le=1_000_000, description="Requests at once (with rate).")

    @model_validator(mode="after")
    def _check_policy(self) -> Self:
        if self.admin and self.access != "read-write":
            raise ValueError('admin: an admin token must have access = "read-write"')
        if self.burst is not None and self.rate is None:
            raise ValueError("burst: a burst needs a rate (requests per second)")
        return self

    @property
    def quota(self) -> Quota | None:
        return Quota(rate=self.rate, burst=self.burst) if self.rate is not None else None


class TokenEntry(Policy):
    """One ``[[tokens]]`` entry of the configuration (see docs/auth.md)."""

    name: TokenName = Field(description="Recorded in locked_by; letters, digits, . _ : @ -")
    sha256: Annotated[str, StringConstraints(pattern=r"^[0-9a-fA-F]{64}$")]

    @field_validator("prefixes")
    @classmethod
    def _check_prefixes(cls, prefixes: list[str]) -> list[str]:
        return [check_prefix(prefix) for prefix in prefixes]


def digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


def hash_secret(secret: str) -> str:
    """What goes into the configuration's ``sha256`` field for this secret."""
    return hashlib.sha256(secret.encode()).hexdigest()

"""The API token configuration: its format, parsing and validation, and how secrets are hashed.

The configuration lists tokens by the SHA-256 of their secret, never the secret, so the file is not itself a
credential (it can sit in a ConfigMap or a repository). A fast hash is enough because the secrets are random
256-bit strings (``schedlock-server new-token``): slow hashes (bcrypt, argon2) exist to make guessing
*low-entropy passwords* expensive, and nobody enumerates 2**256 candidates however cheap each one is. A slow
hash would only cost every request milliseconds. ``hash-token`` refuses short secrets for that reason.
"""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

from app.locking.names import NAME_MAX

ALL_NAMES = "*"
_BAD_PREFIX_CHARS = re.compile(r"[\x00-\x1f\x7f-\x9f/]")
#: Secrets shorter than this are refused by ``hash-token``: a fast hash is only safe for high-entropy secrets.
MIN_SECRET_LENGTH = 32


class TokenConfigError(ValueError):
    """The token configuration cannot be used; the message says where and why (never a secret)."""


TokenName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,63}$")]


class TokenEntry(BaseModel):
    """One ``[[tokens]]`` entry of the configuration (see docs/auth.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: TokenName = Field(description="Recorded in locked_by; letters, digits, . _ : @ -")
    sha256: Annotated[str, StringConstraints(pattern=r"^[0-9a-fA-F]{64}$")]
    prefixes: list[str] = Field(min_length=1)
    access: Literal["read", "read-write"]
    admin: bool = Field(default=False, description="May force-release locks within its prefixes (docs/history.md).")

    @field_validator("prefixes")
    @classmethod
    def _check_prefixes(cls, prefixes: list[str]) -> list[str]:
        for prefix in prefixes:
            if prefix == ALL_NAMES:
                continue
            if not prefix:
                raise ValueError('an empty prefix is not allowed; write "*" for every name')
            if prefix.endswith("*"):
                raise ValueError(f'prefixes are literal, not globs: write {prefix.rstrip("*")!r}, or "*" alone')
            if len(prefix) > NAME_MAX or _BAD_PREFIX_CHARS.search(prefix):
                raise ValueError(f"{prefix!r} can never match a lock name (1-64 characters, no control chars, no /)")
        return prefixes

    @model_validator(mode="after")
    def _check_admin(self) -> TokenEntry:
        if self.admin and self.access != "read-write":
            raise ValueError('admin: an admin token must have access = "read-write"')
        return self


class _TokenFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tokens: list[TokenEntry] = Field(default_factory=list)


def parse_tokens(text: str, source: str) -> list[TokenEntry]:
    """Parse one configuration text (JSON if it starts with '{', TOML otherwise)."""
    try:
        raw = json.loads(text) if text.lstrip().startswith("{") else tomllib.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        raise TokenConfigError(f"{source}: not valid JSON or TOML ({exc})") from None
    try:
        return _TokenFile.model_validate(raw).tokens
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg'].removeprefix('Value error, ')}"
            for err in exc.errors(include_input=False)
        )
        raise TokenConfigError(f"{source}: {problems}") from None


def digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


def hash_secret(secret: str) -> str:
    """What goes into the configuration's ``sha256`` field for this secret."""
    return hashlib.sha256(secret.encode()).hexdigest()

"""The authentication configuration: one file (and/or the inline setting), TOML or JSON, with ``[[tokens]]``,
``[[issuers]]`` and ``[[bindings]]`` (docs/auth.md). Parsed and checked as a whole: a binding must name a
configured issuer, token names and issuers are unique."""

from __future__ import annotations

import json
import tomllib

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from app.auth.identity import BindingEntry, IssuerEntry
from app.auth.tokens import TokenConfigError, TokenEntry


class AuthConfig(BaseModel):
    """What one configuration text holds."""

    model_config = ConfigDict(extra="forbid")
    tokens: list[TokenEntry] = Field(default_factory=list)
    issuers: list[IssuerEntry] = Field(default_factory=list)
    bindings: list[BindingEntry] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check_references(self) -> AuthConfig:
        names = [i.name for i in self.issuers]
        for field, values in (("name", names), ("issuer", [i.issuer for i in self.issuers])):
            duplicates = sorted({v for v in values if values.count(v) > 1})
            if duplicates:
                raise ValueError(f"issuers: {field} {duplicates[0]!r} is configured twice")
        for index, binding in enumerate(self.bindings):
            if binding.issuer not in names:
                raise ValueError(f"bindings.{index}.issuer: no [[issuers]] entry is named {binding.issuer!r}")
        return self

    def merged(self, other: AuthConfig) -> AuthConfig:
        return AuthConfig(
            tokens=self.tokens + other.tokens,
            issuers=self.issuers + other.issuers,
            bindings=self.bindings + other.bindings,
        )


def parse_config(text: str, source: str) -> AuthConfig:
    """Parse one configuration text (JSON if it starts with '{', TOML otherwise); TokenConfigError says why not."""
    try:
        raw = json.loads(text) if text.lstrip().startswith("{") else tomllib.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        raise TokenConfigError(f"{source}: not valid JSON or TOML ({exc})") from None
    try:
        return AuthConfig.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg'].removeprefix('Value error, ')}".lstrip(": ")
            for err in exc.errors(include_input=False)
        )
        raise TokenConfigError(f"{source}: {problems}") from None


def parse_tokens(text: str, source: str) -> list[TokenEntry]:
    """The ``[[tokens]]`` of one configuration text."""
    return parse_config(text, source).tokens

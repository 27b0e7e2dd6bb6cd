"""API tokens for tests: a configuration from a few (name, prefixes, access, admin, quota) entries, and their
headers."""

from __future__ import annotations

import json
from dataclasses import dataclass

from app.auth.tokens import hash_secret
from app.settings import Settings


@dataclass(frozen=True)
class Token:
    name: str
    prefixes: tuple[str, ...] = ("*",)
    access: str = "read-write"
    admin: bool = False
    rate: float | None = None  # a quota (docs/auth.md): requests per second
    burst: int | None = None

    @property
    def secret(self) -> str:
        return f"{self.name}-secret-" + "s" * 40

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.secret}"}


def with_tokens(settings: Settings, *tokens: Token) -> Settings:
    """``settings`` with exactly these tokens configured (inline)."""
    entries = [
        {"name": t.name, "sha256": hash_secret(t.secret), "prefixes": list(t.prefixes), "access": t.access}
        | ({"admin": True} if t.admin else {})
        | ({"rate": t.rate} if t.rate is not None else {})
        | ({"burst": t.burst} if t.burst is not None else {})
        for t in tokens
    ]
    return settings.model_copy(update={"tokens": json.dumps({"tokens": entries})})

"""Tokens for the dashboard's tests: an admin for every name, and a read-only token limited to one prefix."""

from __future__ import annotations

import json

from app.auth.tokens import hash_secret

SECRETS = {"ops": "ops-secret-" + "o" * 40, "billing": "billing-secret-" + "b" * 40}


def ui_tokens(prefix: str = "billing.") -> str:
    """The token configuration (JSON): ``ops`` (admin, every name) and ``billing`` (read, names under ``prefix``)."""
    ops = {"name": "ops", "sha256": hash_secret(SECRETS["ops"]), "prefixes": ["*"], "access": "read-write"}
    billing = {"name": "billing", "sha256": hash_secret(SECRETS["billing"]), "prefixes": [prefix], "access": "read"}
    return json.dumps({"tokens": [{**ops, "admin": True}, billing]})

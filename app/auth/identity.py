"""Workload identity's configuration: the JWT issuers the server trusts (``[[issuers]]``) and the bindings that
turn a verified token's claims into a principal (``[[bindings]]``), beside the tokens in the same file.

A binding is a policy like a token's (prefixes, access, admin, a quota) for the tokens of one issuer whose claims
match its bound ``claims``; its principal's ``name`` and its ``prefixes`` may be templated from claims
(``"{kubernetes.io.namespace}."``), so that one binding serves every namespace. A claim is named by its path, the
object keys joined with dots; a key that itself holds dots (Kubernetes' ``kubernetes.io``) is found as one key.

A claim's value used in a template must be a plain word of the principal-name alphabet (letters, digits,
``. _ : @ -``): never ``*``, ``/`` or empty, so no claim can widen a prefix or escape its place in the name.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from app.auth.exposure import is_loopback
from app.auth.tokens import ALL_NAMES, NAME_RULE, Policy, TokenName, check_prefix

#: Asymmetric signature algorithms a JWT may use. ``none`` and the HMAC ones (HS256, ...) never: a public key is
#: public, and a verifier that accepted HMAC could be handed a token "signed" with it (key confusion).
Algorithm = Literal["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"]
DEFAULT_ALGORITHMS: tuple[Algorithm, ...] = ("RS256", "ES256", "EdDSA")

_PLACEHOLDER = re.compile(r"\{([^{}]+)\}")
#: What a claim's value must be to go into a template (the principal-name alphabet, no "*", no "/").
_TEMPLATE_VALUE = re.compile(r"[A-Za-z0-9._:@-]+")


def fetch_url_problem(url: str) -> str | None:
    """Why keys cannot be fetched from ``url`` (None if they can): https, or http to a loopback address only."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return f"not a URL: {url!r}"
    if not parts.hostname or parts.scheme not in ("http", "https"):
        return f"not an http(s) URL: {url!r}"
    if parts.scheme == "http" and not is_loopback(parts.hostname):
        return f"keys are fetched over https only (http to loopback addresses for tests): {url!r}"
    return None


class IssuerEntry(BaseModel):
    """One ``[[issuers]]`` entry: whose JWTs are trusted, for which audiences, and where its keys come from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: TokenName = Field(description="How bindings and logs name this issuer.")
    issuer: str = Field(min_length=1, description="A token's iss must be exactly this.")
    audiences: tuple[str, ...] = Field(min_length=1, description="A token's aud must hold one of these.")
    jwks_url: str | None = Field(default=None, description="The keys (a JWK Set); default: from OIDC discovery.")
    discovery_url: str | None = Field(
        default=None, description="Default: the issuer's /.well-known/openid-configuration."
    )
    keys: tuple[str, ...] | None = Field(default=None, description="PEM public keys: nothing is fetched.")
    algorithms: tuple[Algorithm, ...] = Field(default=DEFAULT_ALGORITHMS, min_length=1)
    leeway: float = Field(default=30.0, ge=0, le=300, description="Seconds of clock skew allowed on exp, nbf, iat.")
    max_lifetime: float = Field(default=86400.0, gt=0, description="Seconds a token may live (exp - iat) at most.")
    refetch_interval: float = Field(
        default=60.0, gt=0, description="Seconds between fetches of the keys for a token whose kid is unknown."
    )
    refresh_interval: float = Field(
        default=3600.0, gt=0, description="Seconds after which known keys are fetched anew."
    )
    ca_file: Path | None = Field(default=None, description="CA bundle for https fetches (a cluster's ca.crt).")
    fetch_token_file: Path | None = Field(
        default=None, description="A bearer token sent with the fetches (a pod's own service-account token)."
    )

    @model_validator(mode="after")
    def _check_sources(self) -> IssuerEntry:
        if self.keys is not None and (self.jwks_url or self.discovery_url):
            raise ValueError("keys: give PEM keys or a place to fetch them (jwks_url, discovery_url), not both")
        if self.keys is not None and not self.keys:
            raise ValueError("keys: an empty list of keys trusts nothing")
        if self.keys is None:
            problem = fetch_url_problem(self.jwks_url or self.discovery_url or self.default_discovery_url)
            if problem:
                raise ValueError(problem)
        return self

    @property
    def default_discovery_url(self) -> str:
        return self.issuer.rstrip("/") + "/.well-known/openid-configuration"


class BindingEntry(Policy):
    """One ``[[bindings]]`` entry: the tokens of ``issuer`` whose claims match ``claims`` get this policy, as the
    principal ``name`` (both templated from claims)."""

    issuer: TokenName = Field(description="The name of an [[issuers]] entry.")
    name: str = Field(default="{sub}", min_length=1, description="The principal's name, templated from claims.")
    claims: dict[str, str | list[str]] = Field(
        default_factory=dict, description="Bound claims: each must equal the value, or one of the values."
    )

    @field_validator("prefixes")
    @classmethod
    def _check_prefixes(cls, prefixes: list[str]) -> list[str]:
        for prefix in prefixes:
            if prefix != ALL_NAMES and _PLACEHOLDER.search(prefix):
                if not _PLACEHOLDER.sub("", prefix):
                    raise ValueError(f"{prefix!r} is only a claim: give it a fixed part too")
                check_prefix(_PLACEHOLDER.sub("x", prefix))
            else:
                check_prefix(prefix)
        return prefixes

    @field_validator("name")
    @classmethod
    def _check_name(cls, name: str) -> str:
        if not NAME_RULE.fullmatch(_PLACEHOLDER.sub("x", name)):
            raise ValueError(f"{name!r} cannot make a principal name (letters, digits, . _ : @ -; 1-64 characters)")
        return name

    def matches(self, claims: dict[str, Any]) -> bool:
        """Whether every bound claim of this binding has one of its values in ``claims``."""
        for path, wanted in self.claims.items():
            value = claim(claims, path)
            allowed = [wanted] if isinstance(wanted, str) else wanted
            if isinstance(value, list):  # a list claim (groups, aud) matches when one of its items does
                if not any(isinstance(item, str) and item in allowed for item in value):
                    return False
            elif not isinstance(value, str) or value not in allowed:
                return False
        return True


class ClaimProblem(Exception):
    """A template could not be filled from a token's claims; ``reason`` is the code logged."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


def claim(claims: dict[str, Any], path: str) -> Any:
    """The value at ``path`` (keys joined by dots; the longest key that exists is taken at each level, so
    ``kubernetes.io.namespace`` finds ``{"kubernetes.io": {"namespace": ...}}``), or None."""
    node: Any = claims
    parts = path.split(".")
    while parts:
        if not isinstance(node, dict):
            return None
        for end in range(len(parts), 0, -1):
            key = ".".join(parts[:end])
            if key in node:
                node, parts = node[key], parts[end:]
                break
        else:
            return None
    return node


def render(template: str, claims: dict[str, Any]) -> str:
    """``template`` with each ``{path}`` replaced by that claim's value; raises ClaimProblem when one is missing or
    is not a plain word (see the module)."""

    def value(match: re.Match[str]) -> str:
        found = claim(claims, match.group(1))
        if found is None:
            raise ClaimProblem("claim_missing", f"no claim {match.group(1)!r}")
        if not isinstance(found, str) or not _TEMPLATE_VALUE.fullmatch(found):
            raise ClaimProblem("claim_unusable", f"claim {match.group(1)!r} is not a plain word")
        return found

    return _PLACEHOLDER.sub(value, template)

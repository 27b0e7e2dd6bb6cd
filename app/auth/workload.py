"""JWTs from trusted issuers become principals: the workload identity a platform already gives its apps (a pod's
projected service-account token, a CI job's OIDC token, any OIDC provider's access token). docs/auth.md.

Verification is PyJWT's, as the anchors do it: the header's algorithm must be one of the issuer's allowed
asymmetric algorithms (``none`` and HMAC never); the signature is checked with a key of the issuer of that kind
(by ``kid``); then ``iss`` (exactly the issuer), ``aud`` (one of its audiences), ``exp``, ``nbf`` and ``iat`` with
a small leeway, and a lifetime (``exp - iat``) no longer than the issuer's maximum. The first binding of the
issuer whose bound claims match makes the principal.

Every refusal is Unauthorized with the same message for the caller; the log line says why (``reason``: a code
from REASONS) with the issuer and kid, never the token. A verified token's principal is kept until the token's
``exp`` (a bounded table by the token's SHA-256, emptied when full): its next requests cost a lookup, not a
signature check (docs/auth.md, "What it costs").
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

import jwt

from app.auth.identity import DEFAULT_ALGORITHMS, BindingEntry, ClaimProblem, IssuerEntry, render
from app.auth.keys import KeySet
from app.auth.principal import Principal, principal_of
from app.auth.tokens import NAME_RULE
from app.errors import Unauthorized

logger = logging.getLogger("schedlock.auth")

#: Why a JWT was refused, as logged.
REASONS = (
    "malformed",
    "algorithm_refused",
    "unknown_issuer",
    "unknown_kid",
    "bad_signature",
    "expired",
    "not_yet_valid",
    "wrong_issuer",
    "wrong_audience",
    "claim_missing",
    "claim_unusable",
    "lifetime_too_long",
    "no_binding",
    "name_unusable",
    "invalid",
)
#: Verified tokens remembered (a principal each, until the token's exp).
CACHE_SIZE = 4096
_ASYMMETRIC = frozenset(DEFAULT_ALGORITHMS) | {"RS384", "RS512", "PS256", "PS384", "PS512", "ES384", "ES512"}
_REQUIRED = ["exp", "iat", "iss", "aud"]


class Refused(Exception):
    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(detail or reason)
        self.reason = reason


class WorkloadIdentity:
    """The trusted issuers and their bindings; ``principal(token, digest)`` verifies a JWT (see the module).
    ``previous``: the identity this one replaces (a reload), whose fetched keys are kept for unchanged issuers."""

    def __init__(
        self,
        issuers: Iterable[IssuerEntry],
        bindings: Iterable[BindingEntry],
        previous: WorkloadIdentity | None = None,
        clock: Callable[[], float] = time.time,
        cache_size: int = CACHE_SIZE,
    ) -> None:
        kept = {ks.entry: ks for ks in previous.keys.values()} if previous is not None else {}
        self.keys: dict[str, KeySet] = {e.issuer: kept.get(e) or KeySet(e) for e in issuers}
        self._bindings: dict[str, list[BindingEntry]] = {}
        names = {ks.entry.name: iss for iss, ks in self.keys.items()}
        for binding in bindings:
            self._bindings.setdefault(names[binding.issuer], []).append(binding)
        self._clock = clock
        self._cache: dict[bytes, tuple[Principal, float]] = {}
        self._cache_size = cache_size

    async def principal(self, token: str, digest: bytes) -> Principal:
        """The principal of a JWT (``digest``: its SHA-256, the cache's key); raises Unauthorized, or
        IssuerUnavailable when its issuer's keys cannot be had."""
        cached = self._cache.get(digest)
        if cached is not None and cached[1] > self._clock():
            return cached[0]
        try:
            principal, exp = await self._verify(token)
        except Refused as refused:
            logger.info(
                "bearer JWT refused: %s",
                refused.reason,
                extra={"fields": {"reason": refused.reason, "detail": str(refused)}},
            )
            raise Unauthorized("invalid token: refused (the server's log says why, by this request's id)") from None
        if len(self._cache) >= self._cache_size:
            self._cache.clear()
        if self._cache_size:
            self._cache[digest] = (principal, exp)
        return principal

    async def _verify(self, token: str) -> tuple[Principal, float]:
        try:  # one parse for the header and the claims (PyJWT's base64url check is Python code, per character)
            unverified_token = jwt.decode_complete(token, options={"verify_signature": False})
        except jwt.PyJWTError:
            raise Refused("malformed") from None
        header, unverified = unverified_token["header"], unverified_token["payload"]
        algorithm, kid, iss = header.get("alg"), header.get("kid"), unverified.get("iss")
        if not isinstance(algorithm, str) or algorithm not in _ASYMMETRIC:
            raise Refused("algorithm_refused", f"alg {str(algorithm)[:20]!r}")
        keys = self.keys.get(iss) if isinstance(iss, str) else None
        if keys is None:
            raise Refused("unknown_issuer", f"iss {str(iss)[:200]!r}")
        entry = keys.entry
        if algorithm not in entry.algorithms:
            raise Refused("algorithm_refused", f"alg {algorithm!r} not allowed for issuer {entry.name!r}")
        if kid is not None and not isinstance(kid, str):
            raise Refused("malformed", "kid is not a string")
        candidates = await keys.find(kid, algorithm)
        if not candidates:
            raise Refused("unknown_kid", f"issuer {entry.name!r} has no {algorithm} key {str(kid)[:100]!r}")
        claims = self._decode(token, entry, algorithm, candidates)
        exp, iat = float(claims["exp"]), float(claims["iat"])
        if exp - iat > entry.max_lifetime:
            raise Refused("lifetime_too_long", f"{exp - iat:.0f} s > {entry.max_lifetime:.0f} s")
        return self._bind(entry, claims), exp

    def _decode(self, token: str, entry: IssuerEntry, algorithm: str, candidates: list[Any]) -> dict[str, Any]:
        options: Any = {"require": _REQUIRED}
        for index, candidate in enumerate(candidates):
            try:
                claims: dict[str, Any] = jwt.decode(
                    token,
                    candidate.key,
                    algorithms=[algorithm],
                    audience=list(entry.audiences),
                    issuer=entry.issuer,
                    leeway=entry.leeway,
                    options=options,
                )
                return claims
            except jwt.InvalidSignatureError:
                if index == len(candidates) - 1:
                    raise Refused("bad_signature", f"issuer {entry.name!r}") from None
            except jwt.ExpiredSignatureError:
                raise Refused("expired") from None
            except jwt.ImmatureSignatureError:
                raise Refused("not_yet_valid") from None
            except jwt.InvalidAudienceError:
                raise Refused("wrong_audience") from None
            except jwt.InvalidIssuerError:
                raise Refused("wrong_issuer") from None
            except jwt.MissingRequiredClaimError as exc:
                raise Refused("claim_missing", str(exc)) from None
            except jwt.DecodeError:
                raise Refused("malformed") from None
            except (jwt.PyJWTError, TypeError, ValueError) as exc:
                raise Refused("invalid", type(exc).__name__) from None
        raise Refused("bad_signature")  # pragma: no cover (candidates is never empty here)

    def _bind(self, entry: IssuerEntry, claims: dict[str, Any]) -> Principal:
        for binding in self._bindings.get(entry.issuer, ()):
            if not binding.matches(claims):
                continue
            try:
                name = render(binding.name, claims)
                prefixes = [render(p, claims) for p in binding.prefixes]
            except ClaimProblem as problem:
                raise Refused(problem.reason, str(problem)) from None
            if not NAME_RULE.fullmatch(name):
                raise Refused("name_unusable", f"binding of issuer {entry.name!r} makes a name out of the rule")
            return principal_of(name, prefixes, binding, issuer=entry.name)
        raise Refused("no_binding", f"no binding of issuer {entry.name!r} matches the token's claims")

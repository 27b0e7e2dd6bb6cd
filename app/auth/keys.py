"""An issuer's signing keys: PEM keys from the configuration, or a JWK Set fetched (OIDC discovery, then its
``jwks_uri``; or a JWKS URL) and cached.

- Known keys are used without asking the issuer; they are fetched anew when older than ``refresh_interval``.
- A token whose ``kid`` is not among them makes one fetch, at most one per ``refetch_interval`` whatever the number
  of such tokens (a flood of made-up kids costs the issuer one request per interval, not one per call), and
  concurrent callers wait for that one fetch rather than making their own.
- A fetch that fails keeps the keys already known: an issuer that is down leaves verification working. Only when
  no key was ever fetched does a token of that issuer get 503 ``issuer_unavailable``.
- Rotation needs no restart: a new key's first token brings the new set (its kid is unknown), and a key the issuer
  dropped goes at the next fetch.

Fetches are httpx's async requests, so the event loop goes on serving while one is in flight.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from app.auth.identity import IssuerEntry, fetch_url_problem
from app.errors import IssuerUnavailable

logger = logging.getLogger("schedlock.auth")

#: A discovery document or a JWK Set larger than this is refused (a real one is a few kilobytes).
MAX_DOCUMENT_BYTES = 1 << 20
FETCH_TIMEOUT = 5.0
_CURVES = {"secp256r1": "ES256", "secp384r1": "ES384", "secp521r1": "ES512"}


@dataclass(frozen=True, slots=True)
class Key:
    kid: str | None
    key: Any  # a cryptography public key
    family: str  # "RSA" (RS*, PS*), "ES256"/"ES384"/"ES512" (by curve), or "EdDSA"


def family_of(algorithm: str) -> str:
    """Which keys may verify ``algorithm``: RSA ones for RS*/PS*, an EC key on its curve for ES*, Ed25519/Ed448."""
    return "RSA" if algorithm[:2] in ("RS", "PS") else algorithm


def _key_family(key: Any) -> str | None:
    if isinstance(key, rsa.RSAPublicKey):
        return "RSA"
    if isinstance(key, ec.EllipticCurvePublicKey):
        return _CURVES.get(key.curve.name)
    if isinstance(key, ed25519.Ed25519PublicKey | ed448.Ed448PublicKey):
        return "EdDSA"
    return None  # a private key, or a kind no allowed algorithm verifies


def pem_keys(pems: tuple[str, ...], issuer: str) -> list[Key]:
    """The configuration's PEM public keys; ValueError for one that is not a public key of a usable kind."""
    keys = []
    for index, pem in enumerate(pems):
        try:
            key = load_pem_public_key(pem.encode())
        except ValueError:
            raise ValueError(f"issuer {issuer!r}: keys[{index}] is not a PEM public key") from None
        family = _key_family(key)
        if family is None:
            raise ValueError(f"issuer {issuer!r}: keys[{index}] is not an RSA, EC (P-256/384/521) or Ed25519 key")
        keys.append(Key(None, key, family))
    return keys


def jwks_keys(document: Any) -> list[Key]:
    """The signature keys of a JWK Set; keys for encryption, private keys and unknown kinds are left out."""
    if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        raise ValueError("not a JWK Set")
    keys = []
    for entry in document["keys"]:
        if not isinstance(entry, dict) or entry.get("use", "sig") != "sig" or "d" in entry:
            continue
        try:
            key = jwt.PyJWK(entry).key
        except (jwt.PyJWTError, ValueError, TypeError, KeyError):
            continue
        family = _key_family(key)
        kid = entry.get("kid")
        if family is not None:
            keys.append(Key(kid if isinstance(kid, str) else None, key, family))
    return keys


class KeySet:
    """One issuer's keys (see the module). ``fetches`` counts the fetches tried, for tests and logs."""

    def __init__(self, entry: IssuerEntry, clock: Callable[[], float] = time.monotonic) -> None:
        self.entry = entry
        self._clock = clock
        self._static = entry.keys is not None
        self._keys: list[Key] = pem_keys(entry.keys, entry.name) if entry.keys is not None else []
        self._fetched_at: float | None = None
        self._tried_at: float | None = None
        self._lock = asyncio.Lock()
        self.fetches = 0

    async def find(self, kid: str | None, algorithm: str) -> list[Key]:
        """The keys that may have signed a token with this ``kid`` and ``algorithm`` (every key of the algorithm's
        kind when the token names no kid). Raises IssuerUnavailable when no key was ever had."""
        family = family_of(algorithm)
        found = self._matching(kid, family)
        if self._static:
            return found
        now = self._clock()
        stale = self._fetched_at is None or now - self._fetched_at > self.entry.refresh_interval
        if (not found or stale) and (self._may_fetch(now) or self._lock.locked()):
            await self._refresh()  # or wait for the fetch in flight
            found = self._matching(kid, family)
        if not found and self._fetched_at is None:
            raise IssuerUnavailable(f"the keys of issuer {self.entry.name!r} cannot be fetched now; retry later")
        return found

    def _matching(self, kid: str | None, family: str) -> list[Key]:
        return [k for k in self._keys if k.family == family and (kid is None or k.kid == kid)]

    def _may_fetch(self, now: float) -> bool:
        return self._tried_at is None or now - self._tried_at >= self.entry.refetch_interval

    async def _refresh(self) -> None:
        async with self._lock:
            if not self._may_fetch(self._clock()):
                return  # another caller fetched while this one waited
            self._tried_at = self._clock()
            self.fetches += 1
            try:
                keys = jwks_keys(await self._fetch_jwks())
            except (httpx.HTTPError, ValueError, OSError) as exc:
                kept = f"keeping its {len(self._keys)} known key(s)" if self._keys else "no key known yet"
                logger.warning(
                    "issuer %s: keys not fetched (%s); %s",
                    self.entry.name,
                    exc,
                    kept,
                    extra={"fields": {"issuer": self.entry.name, "reason": "fetch_failed"}},
                )
                return
            self._keys, self._fetched_at = keys, self._clock()
            logger.info("issuer %s: %d key(s) fetched", self.entry.name, len(keys))

    async def _fetch_jwks(self) -> Any:
        entry = self.entry
        headers = {"Accept": "application/json"}
        if entry.fetch_token_file is not None:
            headers["Authorization"] = "Bearer " + entry.fetch_token_file.read_text().strip()
        verify: ssl.SSLContext | bool = (
            ssl.create_default_context(cafile=str(entry.ca_file)) if entry.ca_file is not None else True
        )
        async with httpx.AsyncClient(verify=verify, timeout=FETCH_TIMEOUT, headers=headers) as client:
            url = entry.jwks_url
            if url is None:
                discovery = await _get_json(client, entry.discovery_url or entry.default_discovery_url)
                if not isinstance(discovery, dict) or discovery.get("issuer") != entry.issuer:
                    raise ValueError("the discovery document names another issuer")
                url = discovery.get("jwks_uri")
                if not isinstance(url, str):
                    raise ValueError("the discovery document has no jwks_uri")
                problem = fetch_url_problem(url)
                if problem:
                    raise ValueError(problem)
            return await _get_json(client, url)


async def _get_json(client: httpx.AsyncClient, url: str) -> Any:
    response = await client.get(url)
    response.raise_for_status()
    if len(response.content) > MAX_DOCUMENT_BYTES:
        raise ValueError(f"{url}: larger than {MAX_DOCUMENT_BYTES} bytes")
    return response.json()

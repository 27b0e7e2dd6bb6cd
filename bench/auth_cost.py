"""``python -m bench.auth_cost``: what authenticating a request costs, a JWT principal against a static token.

In one process, on the server's own code (``Authenticator.authenticate``, ``WorkloadIdentity.principal``): a static
token (one SHA-256, a lookup, a constant-time compare); a JWT whose verification is cached (the same token again,
until its exp: the SHA-256 and a lookup more); a JWT verified every time (PyJWT: header, claims, the signature with
RS256, ES256 or EdDSA, the binding's templates); and a static token with a quota (the limiter's bucket). Variants are
interleaved round by round, so a machine shared with other work slows them alike; each figure is the median over
rounds of the mean per call in a round, and each ratio is taken within a round. docs/auth.md quotes the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from app.auth.authenticator import Authenticator
from app.auth.config import parse_config
from app.auth.workload import WorkloadIdentity
from app.settings import Settings

ISSUER = "https://issuer.example"
SECRET = "static-secret-" + "s" * 40
ALGORITHMS = ("RS256", "ES256", "EdDSA")


def _key(algorithm: str) -> Any:
    if algorithm == "RS256":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    if algorithm == "ES256":
        return ec.generate_private_key(ec.SECP256R1())
    return ed25519.Ed25519PrivateKey.generate()


def _config(keys: dict[str, Any], rate: float | None) -> str:
    pems = [
        k.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo).decode() for k in keys.values()
    ]
    token: dict[str, Any] = {
        "name": "static",
        "sha256": hashlib.sha256(SECRET.encode()).hexdigest(),
        "prefixes": ["billing."],
        "access": "read-write",
    }
    binding: dict[str, Any] = {"issuer": "idp", "prefixes": ["{kubernetes.io.namespace}."], "access": "read-write"}
    if rate is not None:
        token["rate"] = binding["rate"] = rate
    issuer = {"name": "idp", "issuer": ISSUER, "audiences": ["schedlock"], "keys": pems}
    return json.dumps({"tokens": [token], "issuers": [issuer], "bindings": [binding]})


def _token(key: Any, algorithm: str) -> str:
    now = int(time.time())
    claims = {
        "iss": ISSUER,
        "aud": ["schedlock"],
        "iat": now,
        "nbf": now,
        "exp": now + 3600,
        "sub": "system:serviceaccount:billing:cron",
        "kubernetes.io": {"namespace": "billing", "serviceaccount": {"name": "cron"}},
    }
    return jwt.encode(claims, key, algorithm=algorithm)


async def _per_call(call: Callable[[], Awaitable[object]], calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        await call()
    return (time.perf_counter() - started) / calls


async def measure(rounds: int, calls: int) -> dict[str, Any]:
    keys = {alg: _key(alg) for alg in ALGORITHMS}
    config = _config(keys, None)
    auth = Authenticator(Settings(tokens=config))
    limited = Authenticator(Settings(tokens=_config(keys, 1e6)))
    parsed = parse_config(config, "bench")
    uncached = WorkloadIdentity(parsed.issuers, parsed.bindings, cache_size=0)
    tokens = {alg: _token(key, alg) for alg, key in keys.items()}
    static = f"Bearer {SECRET}"
    variants: dict[str, Callable[[], Awaitable[object]]] = {
        "static token": lambda: auth.authenticate(static),
        "static token with a quota": lambda: limited.authenticate(static),
        "JWT, verification cached": lambda: auth.authenticate(f"Bearer {tokens['RS256']}"),
    }
    for alg, token in tokens.items():
        digest = hashlib.sha256(token.encode()).digest()
        variants[f"JWT {alg}, verified each time"] = lambda t=token, d=digest: uncached.principal(t, d)  # type: ignore[misc]
    for call in variants.values():  # warm: caches filled, code paths run once
        await call()
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    ratios: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        this_round = {}
        for name, call in variants.items():
            # fewer calls for the slow variants: each round stays a fraction of a second
            n = calls if "each time" not in name else max(1, calls // 20)
            this_round[name] = await _per_call(call, n)
        for name, value in this_round.items():
            seconds[name].append(value)
            ratios[name].append(value / this_round["static token"])
    return {
        name: {
            "us_per_call": round(statistics.median(seconds[name]) * 1e6, 2),
            "x_static": round(statistics.median(ratios[name]), 1),
        }
        for name in variants
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.auth_cost", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument(
        "--calls", type=int, default=2000, help="calls per round for the fast variants (1/20 for the rest)"
    )
    args = parser.parse_args()
    results = asyncio.run(measure(args.rounds, args.calls))
    width = max(map(len, results))
    for name, figures in results.items():
        print(f"{name:<{width}}  {figures['us_per_call']:>9.2f} µs  {figures['x_static']:>6.1f} x static")


if __name__ == "__main__":
    main()

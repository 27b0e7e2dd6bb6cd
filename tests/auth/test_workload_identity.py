"""Workload identity: JWTs of a trusted issuer (here shaped like kube-apiserver's projected service-account tokens,
served through discovery and a JWK Set on loopback) become principals by bindings; every bad token is a 401 that
changes nothing; keys are fetched once per interval whatever the flood; rotation needs no restart; an issuer that
is down leaves its cached keys working. And quotas: a caller over its rate gets 429 while another is unaffected."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import logging
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from fastapi import FastAPI

from app.auth.authenticator import Authenticator
from app.auth.config import parse_config
from app.auth.identity import ClaimProblem, claim, render
from app.auth.tokens import TokenConfigError, hash_secret
from app.errors import IssuerUnavailable, RateLimited, Unauthorized
from app.settings import Settings
from tests.support.apps import in_process
from tests.support.issuer import AUDIENCE, Issuer, SigningKey, issuer_config, serving
from tests.support.metrics import scrape

#: One binding for every namespace: a pod's service account may use the names of its namespace.
PER_NAMESPACE = {
    "issuer": "cluster",
    "name": "{sub}",
    "prefixes": ["{kubernetes.io.namespace}."],
    "access": "read-write",
}
#: The reports namespace's "runaway" account has a quota; bound claims pick it before the general binding.
LIMITED = {
    "issuer": "cluster",
    "claims": {"kubernetes.io.serviceaccount.name": "runaway"},
    "prefixes": ["{kubernetes.io.namespace}."],
    "access": "read-write",
    "rate": 1,
    "burst": 3,
}
#: The ops namespace's accounts may force-release billing's locks.
OPS = {
    "issuer": "cluster",
    "claims": {"kubernetes.io.namespace": "ops"},
    "prefixes": ["billing."],
    "access": "read-write",
    "admin": True,
}
ADMIN_SECRET = "ops-secret-" + "o" * 40
ADMIN = {"name": "ops", "sha256": hash_secret(ADMIN_SECRET), "prefixes": ["*"], "access": "read-write", "admin": True}


@pytest.fixture(scope="module")
def issuer() -> Iterator[Issuer]:
    with serving() as running:
        yield running


@pytest.fixture(scope="module")
async def pair(settings: Settings, issuer: Issuer) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    config = issuer_config(issuer, [OPS, LIMITED, PER_NAMESPACE], tokens=[ADMIN], refetch_interval=3600)
    async with in_process(settings.model_copy(update={"tokens": config})) as running:
        yield running


@pytest.fixture(scope="module")
def api(pair: tuple[FastAPI, httpx.AsyncClient]) -> httpx.AsyncClient:
    return pair[1]


@pytest.fixture
def tag() -> str:
    return uuid.uuid4().hex[:10]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


ACQUIRE = {"lock_at_most_for": "10m", "holder": "pod-1"}


async def test_a_pods_token_takes_extends_and_releases_and_its_name_is_recorded(
    api: httpx.AsyncClient, issuer: Issuer, db: Any, settings: Settings, tag: str
) -> None:
    token = issuer.token()
    name = f"billing.{tag}"
    taken = await api.post(f"/v1/locks/{name}/acquire", json=ACQUIRE, headers=bearer(token))
    assert taken.status_code == 200, taken.text
    lease = taken.json()
    assert "via system:serviceaccount:billing:cron lease" in lease["locked_by"]
    extended = await api.post(
        f"/v1/locks/{name}/extend", json={"token": lease["token"], "lock_at_most_for": "5m"}, headers=bearer(token)
    )
    assert extended.status_code == 200 and extended.json()["extended"] is True
    released = await api.post(f"/v1/locks/{name}/release", json={"token": lease["token"]}, headers=bearer(token))
    assert released.status_code == 200 and released.json()["released"] is True
    runs = (await api.get(f"/v1/locks/{name}/runs", headers=bearer(token))).json()["items"]
    assert [r["token_name"] for r in runs] == ["system:serviceaccount:billing:cron"]


async def test_the_prefix_is_the_tokens_own_namespace(api: httpx.AsyncClient, issuer: Issuer, tag: str) -> None:
    reports = issuer.token(issuer.claims(namespace="reports"))
    refused = await api.post(f"/v1/locks/billing.{tag}/acquire", json=ACQUIRE, headers=bearer(reports))
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    assert "system:serviceaccount:reports:cron" in refused.json()["error"]["message"]
    ok = await api.post(f"/v1/locks/reports.{tag}/acquire", json=ACQUIRE, headers=bearer(reports))
    assert ok.status_code == 200, ok.text
    listed = await api.get("/v1/locks", params={"prefix": "billing."}, headers=bearer(reports))
    assert listed.status_code == 200 and listed.json()["items"] == []


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unsigned(claims: dict[str, Any], header: dict[str, Any]) -> str:
    return f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"


def bad_tokens(issuer: Issuer) -> dict[str, str]:
    """Every token the issue lists as bad, for the billing namespace (whose names the good token may use)."""
    key = issuer.keys[0]
    claims = issuer.claims
    good = issuer.token()
    head, payload, signature = good.split(".")
    tampered = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    tampered["kubernetes.io"]["namespace"] = "payments"
    public_pem = key.private.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    confusion_input = _unsigned(claims(), {"alg": "HS256", "typ": "JWT", "kid": key.kid})
    confusion = hmac.new(public_pem, confusion_input.encode(), hashlib.sha256).digest()
    stranger = SigningKey(key.kid, "RS256", SigningKey.new().private)  # the right kid, another key
    return {
        "expired": issuer.token(claims(iat=0, nbf=0, exp=1000)),
        "not_yet_valid": issuer.token(claims(nbf=4_000_000_000)),
        "issued_in_the_future": issuer.token(claims(iat=4_000_000_000, exp=4_000_003_600)),
        "wrong_iss": issuer.token(claims(iss="https://evil.example")),
        "wrong_aud": issuer.token(claims(aud=["vault"])),
        "no_aud": issuer.token({k: v for k, v in claims().items() if k != "aud"}),
        "no_exp": issuer.token({k: v for k, v in claims().items() if k != "exp"}),
        "too_long_lived": issuer.token(claims(lifetime=30 * 86400)),
        "alg_none": _unsigned(claims(), {"alg": "none", "typ": "JWT"}) + ".",
        "hs256_with_the_public_key": f"{confusion_input}.{_b64(confusion)}",
        "unknown_kid": issuer.token(key=SigningKey("made-up-kid", "RS256", SigningKey.new().private)),
        "signed_by_another_key": issuer.token(key=stranger),
        "tampered_payload": f"{head}.{_b64(json.dumps(tampered).encode())}.{signature}",
        "garbage": "eyJhbGciOi.not-a.jwt",
        "namespace_not_a_word": issuer.token(claims(namespace="*")),
    }


async def test_bad_tokens_are_401_and_change_nothing(
    api: httpx.AsyncClient, issuer: Issuer, db: Any, settings: Settings, tag: str, caplog: pytest.LogCaptureFixture
) -> None:
    name = f"billing.{tag}"
    for label, token in bad_tokens(issuer).items():
        with caplog.at_level(logging.INFO, logger="schedlock.auth"):
            caplog.clear()
            for method, path, body in (
                ("POST", f"/v1/locks/{name}/acquire", ACQUIRE),
                ("GET", f"/v1/locks/{name}", None),
                ("PUT", f"/v1/jobs/{name}", {"schedule": "0 3 * * *"}),
            ):
                r = await api.request(method, path, json=body, headers=bearer(token))
                assert r.status_code == 401, (label, method, r.text)
                assert r.json()["error"]["code"] == "unauthorized" and r.headers["www-authenticate"].startswith(
                    "Bearer"
                )
                assert token not in r.text
        reasons = [getattr(rec, "fields", {}).get("reason") for rec in caplog.records]
        assert reasons and all(reasons), (label, caplog.text)
        signature = token.split(".")[-1]
        assert token not in caplog.text and (not signature or signature not in caplog.text), label
    assert await db.fetchval(f"SELECT count(*) FROM {settings.table} WHERE name = $1", name) == 0
    assert await db.fetchval(f"SELECT count(*) FROM {settings.table}_jobs WHERE name = $1", name) == 0


@pytest.mark.parametrize(
    ("label", "reason"),
    [
        ("expired", "expired"),
        ("not_yet_valid", "not_yet_valid"),
        ("issued_in_the_future", "not_yet_valid"),
        ("wrong_iss", "unknown_issuer"),
        ("wrong_aud", "wrong_audience"),
        ("no_exp", "claim_missing"),
        ("too_long_lived", "lifetime_too_long"),
        ("alg_none", "algorithm_refused"),
        ("hs256_with_the_public_key", "algorithm_refused"),
        ("unknown_kid", "unknown_kid"),
        ("signed_by_another_key", "bad_signature"),
        ("tampered_payload", "bad_signature"),
        ("namespace_not_a_word", "claim_unusable"),
    ],
)
async def test_each_refusal_is_logged_with_its_reason(
    issuer: Issuer, label: str, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    auth = Authenticator(Settings(tokens=issuer_config(issuer, [PER_NAMESPACE])))
    with caplog.at_level(logging.INFO, logger="schedlock.auth"), pytest.raises(Unauthorized):
        await auth.authenticate(f"Bearer {bad_tokens(issuer)[label]}")
    assert [getattr(r, "fields", {}).get("reason") for r in caplog.records if r.levelno == logging.INFO][-1] == reason


async def test_bound_claims_pick_the_binding_and_no_match_is_401(issuer: Issuer) -> None:
    only_billing = {**PER_NAMESPACE, "claims": {"kubernetes.io.namespace": ["billing", "payments"]}}
    auth = Authenticator(Settings(tokens=issuer_config(issuer, [only_billing])))
    assert (await auth.authenticate(f"Bearer {issuer.token()}")).prefixes == ("billing.",)
    with pytest.raises(Unauthorized):
        await auth.authenticate(f"Bearer {issuer.token(issuer.claims(namespace='reports'))}")


async def test_a_flood_of_unknown_kids_costs_the_issuer_one_fetch_per_interval(issuer: Issuer) -> None:
    auth = Authenticator(Settings(tokens=issuer_config(issuer, [PER_NAMESPACE], refetch_interval=3600)))

    async def made_up() -> None:
        fake = SigningKey(uuid.uuid4().hex, "RS256", issuer.keys[0].private)
        with pytest.raises(Unauthorized):
            await auth.authenticate(f"Bearer {issuer.token(key=fake)}")

    for wave in range(2):  # the first wave finds no key yet: its callers wait for one fetch together
        before = issuer.jwks_requests
        await asyncio.gather(*(made_up() for _ in range(200)))
        assert issuer.jwks_requests - before == (1 if wave == 0 else 0)
    assert (await auth.authenticate(f"Bearer {issuer.token()}")).name == "system:serviceaccount:billing:cron"


async def test_key_rotation_is_picked_up_without_a_restart(issuer: Issuer) -> None:
    auth = Authenticator(Settings(tokens=issuer_config(issuer, [PER_NAMESPACE], refetch_interval=0.001)))
    old = issuer.keys[0]
    assert (await auth.authenticate(f"Bearer {issuer.token()}")).prefixes == ("billing.",)
    try:
        new = issuer.rotate("ES256")  # the old key is gone from the set
        assert (await auth.authenticate(f"Bearer {issuer.token(key=new)}")).prefixes == ("billing.",)
        with pytest.raises(Unauthorized):  # a new token signed with the dropped key
            await auth.authenticate(f"Bearer {issuer.token(issuer.claims(account='late'), key=old)}")
        eddsa = issuer.rotate("EdDSA", keep_old=True)
        assert (await auth.authenticate(f"Bearer {issuer.token(key=eddsa)}")).prefixes == ("billing.",)
    finally:
        issuer.keys = [old]


async def test_an_issuer_that_is_down_leaves_known_keys_working_and_503_only_without_any(issuer: Issuer) -> None:
    config = issuer_config(issuer, [PER_NAMESPACE], refetch_interval=0.001, refresh_interval=0.001)
    auth = Authenticator(Settings(tokens=config))
    assert (await auth.authenticate(f"Bearer {issuer.token()}")).prefixes == ("billing.",)
    never = Authenticator(Settings(tokens=config))
    issuer.down = True
    try:
        # known keys keep working although each call would refresh them (stale) and the fetch fails
        assert (await auth.authenticate(f"Bearer {issuer.token(issuer.claims(account='b'))}")).prefixes
        with pytest.raises(IssuerUnavailable):
            await never.authenticate(f"Bearer {issuer.token()}")
    finally:
        issuer.down = False
    assert (await never.authenticate(f"Bearer {issuer.token()}")).prefixes == ("billing.",)


async def test_503_over_http_when_no_key_can_be_had(settings: Settings, issuer: Issuer) -> None:
    config = issuer_config(issuer, [PER_NAMESPACE])
    issuer.down = True
    try:
        async with in_process(settings.model_copy(update={"tokens": config})) as (_, api):
            r = await api.post("/v1/locks/billing.x/acquire", json=ACQUIRE, headers=bearer(issuer.token()))
            assert r.status_code == 503 and r.json()["error"]["code"] == "issuer_unavailable"
            assert r.headers["retry-after"] == "5"
    finally:
        issuer.down = False


async def test_pem_keys_need_no_fetching() -> None:
    key = SigningKey.new("ES256")
    pem = key.private.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo).decode()
    offline = Issuer(url="https://ci.example", keys=[key])
    config = json.dumps(
        {
            "issuers": [{"name": "ci", "issuer": offline.url, "audiences": [AUDIENCE], "keys": [pem]}],
            "bindings": [{"issuer": "ci", "name": "ci:{sub}", "prefixes": ["ci."], "access": "read"}],
        }
    )
    auth = Authenticator(Settings(tokens=config))
    token = jwt_without_kid(offline, key)
    principal = await auth.authenticate(f"Bearer {token}")
    assert principal.name == "ci:system:serviceaccount:billing:cron" and not principal.can_write
    assert principal.issuer == "ci"


def jwt_without_kid(issuer: Issuer, key: SigningKey) -> str:
    import jwt

    return jwt.encode(issuer.claims(), key.private, algorithm=key.algorithm)


# --- audit ---------------------------------------------------------------------------------------------------------


async def test_job_changes_and_force_release_are_logged_and_recorded_with_the_principal(
    api: httpx.AsyncClient, issuer: Issuer, tag: str, caplog: pytest.LogCaptureFixture
) -> None:
    pod, ops = issuer.token(), issuer.token(issuer.claims(namespace="ops", account="oncall"))
    name = f"billing.{tag}"
    with caplog.at_level(logging.INFO, logger="schedlock.audit"):
        put = await api.put(f"/v1/jobs/{name}", json={"schedule": "0 3 * * *"}, headers=bearer(pod))
        assert put.status_code == 200 and put.json()["changed_by"] == "system:serviceaccount:billing:cron"
        paused = await api.post(f"/v1/jobs/{name}/pause", headers=bearer(ops))
        assert paused.status_code == 200 and paused.json()["changed_by"] == "system:serviceaccount:ops:oncall"
        resumed = await api.post(f"/v1/jobs/{name}/resume", headers=bearer(pod))
        assert resumed.json()["changed_by"] == "system:serviceaccount:billing:cron"
        await api.post(f"/v1/locks/{name}/acquire", json=ACQUIRE, headers=bearer(pod))
        forced = await api.post(f"/v1/locks/{name}/force-release", json={"reason": "stuck"}, headers=bearer(ops))
        assert forced.status_code == 200 and forced.json()["run"]["forced_by"] == "system:serviceaccount:ops:oncall"
        assert (await api.delete(f"/v1/jobs/{name}", headers=bearer(ops))).status_code == 204
    audit = [r for r in caplog.records if r.name == "schedlock.audit"]
    lines = [getattr(r, "fields", {}) for r in audit]
    assert [(f.get("action"), f["by"], f["issuer"]) for f in lines] == [
        ("job_put", "system:serviceaccount:billing:cron", "cluster"),
        ("job_pause", "system:serviceaccount:ops:oncall", "cluster"),
        ("job_resume", "system:serviceaccount:billing:cron", "cluster"),
        (None, "system:serviceaccount:ops:oncall", "cluster"),  # force-release's line
        ("job_delete", "system:serviceaccount:ops:oncall", "cluster"),
    ]
    assert "force-release" in audit[3].getMessage()


# --- quotas ------------------------------------------------------------------------------------------------------


async def test_a_caller_over_its_quota_gets_429_and_another_is_unaffected(
    pair: tuple[FastAPI, httpx.AsyncClient], issuer: Issuer, tag: str
) -> None:
    _, api = pair
    runaway = issuer.token(issuer.claims(namespace="reports", account="runaway"))
    other = issuer.token(issuer.claims(namespace="reports", account="nightly"))
    answers = [
        await api.post(f"/v1/locks/reports.{tag}.{i}/acquire", json=ACQUIRE, headers=bearer(runaway)) for i in range(6)
    ]
    statuses = [a.status_code for a in answers]
    assert statuses[:3] == [200, 200, 200] and 429 in statuses[3:], statuses
    limited = next(a for a in answers if a.status_code == 429)
    assert limited.json()["error"]["code"] == "rate_limited"
    assert int(limited.headers["retry-after"]) >= 1 and limited.json()["error"]["retry_after"] >= 1
    for i in range(10):  # another caller of the same namespace, no quota
        r = await api.post(f"/v1/locks/reports.{tag}.other{i}/acquire", json=ACQUIRE, headers=bearer(other))
        assert r.status_code == 200, r.text
    samples = await scrape(api)
    refused = sum(1 for a in answers if a.status_code == 429)
    key = ("schedlock_rate_limited_total", frozenset({("principal", "system:serviceaccount:reports:runaway")}))
    assert samples[key] == refused


async def test_a_request_is_counted_once_on_routes_that_read_the_body_first(issuer: Issuer, settings: Settings) -> None:
    # PUT /v1/jobs/{name} authenticates before reading its body, and its dependency asks again: one request.
    limited = {**PER_NAMESPACE, "rate": 0.001, "burst": 2}
    async with in_process(settings.model_copy(update={"tokens": issuer_config(issuer, [limited])})) as (_, api):
        token = issuer.token()
        job = {"schedule": "0 3 * * *"}
        first = await api.put(f"/v1/jobs/billing.{uuid.uuid4().hex[:8]}", json=job, headers=bearer(token))
        second = await api.put(f"/v1/jobs/billing.{uuid.uuid4().hex[:8]}", json=job, headers=bearer(token))
        third = await api.put(f"/v1/jobs/billing.{uuid.uuid4().hex[:8]}", json=job, headers=bearer(token))
        assert (first.status_code, second.status_code, third.status_code) == (200, 200, 429), third.text


def test_the_bucket_refills_at_its_rate() -> None:
    from app.auth.quotas import Quota, RateLimiter

    now = [100.0]
    limiter = RateLimiter(clock=lambda: now[0])
    quota = Quota(rate=2, burst=2)
    limiter.admit("a", quota)
    limiter.admit("a", quota)
    with pytest.raises(RateLimited) as refused:
        limiter.admit("a", quota)
    assert refused.value.headers["Retry-After"] == "1"
    limiter.admit("b", quota)  # another principal has its own bucket
    now[0] += 0.5  # one request's worth at 2 per second
    limiter.admit("a", quota)
    with pytest.raises(RateLimited):
        limiter.admit("a", quota)


# --- configuration ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        ({"issuers": [{"name": "c", "issuer": "https://x", "audiences": []}]}, "audiences"),
        ({"issuers": [{"name": "c", "issuer": "http://cluster.example", "audiences": ["a"]}]}, "https only"),
        (
            {"issuers": [{"name": "c", "issuer": "https://x", "audiences": ["a"], "algorithms": ["HS256"]}]},
            "algorithms.0",
        ),
        (
            {"issuers": [{"name": "c", "issuer": "https://x", "audiences": ["a"], "algorithms": ["none"]}]},
            "algorithms.0",
        ),
        ({"bindings": [{"issuer": "nope", "prefixes": ["a."], "access": "read"}]}, "no [[issuers]] entry"),
        ({"bindings": [{"issuer": "c", "prefixes": ["{ns}"], "access": "read"}]}, "only a claim"),
        ({"bindings": [{"issuer": "c", "prefixes": ["{ns}.*"], "access": "read"}]}, "literal"),
        ({"bindings": [{"issuer": "c", "name": "a b {sub}", "prefixes": ["a."], "access": "read"}]}, "principal name"),
        ({"bindings": [{"issuer": "c", "prefixes": ["a."], "access": "read", "burst": 3}]}, "needs a rate"),
        ({"tokens": [{**ADMIN, "rate": 0}]}, "rate"),
    ],
)
def test_bad_identity_configuration_is_refused_with_a_reason(change: dict[str, Any], complaint: str) -> None:
    config: dict[str, Any] = {"issuers": [{"name": "c", "issuer": "https://x", "audiences": ["a"]}], **change}
    with pytest.raises(TokenConfigError, match=complaint.replace("[", r"\[").replace("]", r"\]")):
        parse_config(json.dumps(config), "tokens.json")


def test_claims_are_found_by_dotted_paths_and_templates_take_plain_words_only() -> None:
    claims = {"kubernetes.io": {"namespace": "billing", "serviceaccount": {"name": "cron"}}, "sub": "x", "n": 3}
    assert claim(claims, "kubernetes.io.namespace") == "billing"
    assert claim(claims, "kubernetes.io.serviceaccount.name") == "cron"
    assert claim(claims, "kubernetes.io.nope") is None and claim(claims, "sub.x") is None
    assert render("{kubernetes.io.namespace}.", claims) == "billing."
    for bad in ("{n}", "{missing}"):
        with pytest.raises(ClaimProblem, match="claim"):
            render(bad, claims)


async def test_the_tokens_file_brings_issuers_on_reload_and_keeps_fetched_keys(issuer: Issuer, tmp_path: Path) -> None:
    file = tmp_path / "tokens.json"
    file.write_text(issuer_config(issuer, [PER_NAMESPACE]))
    auth = Authenticator(Settings(tokens_file=file))
    await auth.authenticate(f"Bearer {issuer.token()}")
    fetched = issuer.jwks_requests
    reads = {**PER_NAMESPACE, "access": "read"}
    file.write_text(issuer_config(issuer, [reads]) + "\n")
    assert auth.reload_if_changed()
    principal = await auth.authenticate(f"Bearer {issuer.token(issuer.claims(account='again'))}")
    assert not principal.can_write and issuer.jwks_requests == fetched

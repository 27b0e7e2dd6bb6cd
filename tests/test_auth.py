"""API tokens: 401 without a known token, 403 outside its prefixes or when read-only, scoped listing, reload,
the CLI that makes tokens, and the refusal to serve an open API beyond loopback."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import tomllib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from app.auth.authenticator import Authenticator
from app.auth.exposure import is_loopback
from app.auth.tokens import TokenConfigError, hash_secret, parse_tokens
from app.errors import Unauthorized
from app.main import create_app
from app.settings import Settings
from tests.support.apps import in_process
from tests.support.servers import start_server, stop_server

SECRETS = {
    "billing": "billing-secret-" + "b" * 40,
    "ops": "ops-secret-" + "o" * 40,
    "reader": "reader-secret-" + "r" * 40,
}


def token_config(**extra: dict[str, Any]) -> str:
    tokens = [
        {"name": "billing-cron", "sha256": hash_secret(SECRETS["billing"]), "prefixes": ["billing."]},
        {"name": "ops", "sha256": hash_secret(SECRETS["ops"]), "prefixes": ["payments.", "billing.eu."]},
        {"name": "auditor", "sha256": hash_secret(SECRETS["reader"]), "prefixes": ["*"], "access": "read"},
    ]
    for t in tokens:
        t.setdefault("access", "read-write")
    return json.dumps({"tokens": tokens})


def bearer(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {SECRETS[who]}"}


@pytest.fixture(scope="module")
async def auth_pair(settings: Settings) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    async with in_process(settings.model_copy(update={"tokens": token_config()})) as pair:
        yield pair


@pytest.fixture(scope="module")
def auth_app(auth_pair: tuple[FastAPI, httpx.AsyncClient]) -> FastAPI:
    return auth_pair[0]


@pytest.fixture(scope="module")
def api(auth_pair: tuple[FastAPI, httpx.AsyncClient]) -> httpx.AsyncClient:
    return auth_pair[1]


@pytest.fixture
def tag() -> str:
    return uuid.uuid4().hex[:10]


def acquire_body(at_most: str = "10m") -> dict[str, Any]:
    return {"lock_at_most_for": at_most, "holder": "host-7"}


# --- 401 -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong-" + "x" * 40},
        {"Authorization": "Basic YWxhZGRpbjpvcGVuc2VzYW1l"},
        {"Authorization": "Bearer"},
        {"Authorization": "Bearer    "},
        {"Authorization": SECRETS["billing"]},  # the secret without the scheme
        {"Authorization": "Bearer " + SECRETS["billing"][:-1]},
    ],
    ids=["none", "unknown", "basic", "empty", "blank", "no-scheme", "truncated"],
)
async def test_missing_or_unknown_token_is_401(
    api: httpx.AsyncClient, db: Any, settings: Settings, tag: str, headers: dict[str, str]
) -> None:
    name = f"billing.{tag}"
    for method, path, body in (
        ("POST", f"/v1/locks/{name}/acquire", acquire_body()),
        ("POST", f"/v1/locks/{name}/release", {"token": "x"}),
        ("POST", f"/v1/locks/{name}/extend", {"token": "x", "lock_at_most_for": "1m"}),
        ("GET", f"/v1/locks/{name}", None),
        ("GET", "/v1/locks", None),
    ):
        r = await api.request(method, path, json=body, headers=headers)
        assert r.status_code == 401, (method, path, r.text)
        assert r.json()["error"]["code"] == "unauthorized"
        assert r.headers["www-authenticate"].startswith("Bearer")
        for secret in SECRETS.values():
            assert secret not in r.text
    assert await db.fetchval(f"SELECT count(*) FROM {settings.table} WHERE name = $1", name) == 0


_GOOD = SECRETS["billing"]


@pytest.mark.parametrize(
    "header",
    [f"Bearer {_GOOD}", f"bearer {_GOOD}", f"BEARER {_GOOD}", f"Bearer   {_GOOD}", f" Bearer {_GOOD}\t"],
    ids=["canonical", "lower", "upper", "spaces", "field-whitespace"],
)
def test_the_bearer_grammar_accepts_rfc_6750_credentials(header: str) -> None:
    assert asyncio.run(Authenticator(Settings(tokens=token_config())).authenticate(header)).name == "billing-cron"


@pytest.mark.parametrize(
    "header",
    [
        f"Bearer\u00a0{_GOOD}",  # no-break space: whitespace to str.strip(), not to RFC 6750
        f"Bearer {_GOOD}\u00a0",
        f"\u0085Bearer {_GOOD}",  # NEL
        f"Bearer {_GOOD}\u0085",
        f"Bearer\u3000{_GOOD}",  # ideographic space
        f"Bearer\t{_GOOD}",  # 1*SP: a tab does not separate scheme and token
        f"Bearer {_GOOD}\n",
        f"Bearer {_GOOD} extra",
        f"Bearer {_GOOD},",
        f"Bearer ={_GOOD}",  # "=" only at the end
        f"Bearer {_GOOD[:5]}\u00e9{_GOOD[5:]}",
        f"Bearer{_GOOD}",
    ],
    ids=repr,
)
def test_the_bearer_grammar_refuses_anything_else(header: str) -> None:
    with pytest.raises(Unauthorized, match="malformed"):
        asyncio.run(Authenticator(Settings(tokens=token_config())).authenticate(header))


@pytest.mark.parametrize("space", ["\u00a0", "\u0085"], ids=["nbsp", "nel"])
async def test_non_ascii_whitespace_around_the_secret_is_401_over_http(api: httpx.AsyncClient, space: str) -> None:
    for header in (f"Bearer {_GOOD}{space}", f"Bearer{space}{_GOOD}"):
        raw = (b"Authorization", header.encode("latin-1"))  # as a client would send the byte
        r = await api.get("/v1/locks/billing.x", headers=[raw])
        assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized", r.text


async def test_unauthenticated_callers_learn_nothing_from_validation(api: httpx.AsyncClient) -> None:
    # A bad name or body from someone without a token is a 401, not a 422 that describes the API's rules.
    r = await api.post("/v1/locks/" + "x" * 80 + "/acquire", json={"surprise": 1})
    assert r.status_code == 401


async def test_probes_and_docs_need_no_token(api: httpx.AsyncClient) -> None:
    for path in ("/healthz", "/readyz", "/docs", "/openapi.json", "/redoc"):
        assert (await api.get(path)).status_code == 200, path


# --- 403 and scope -------------------------------------------------------------------------------------------


async def test_token_uses_names_in_its_prefixes_and_is_recorded_in_locked_by(
    api: httpx.AsyncClient, db: Any, settings: Settings, tag: str
) -> None:
    name = f"billing.{tag}"
    r = await api.post(f"/v1/locks/{name}/acquire", json=acquire_body(), headers=bearer("billing"))
    assert r.status_code == 200, r.text
    lease = r.json()
    assert lease["locked_by"].startswith("host-7 [schedlock via billing-cron lease ")
    row = await db.fetchrow(f"SELECT locked_by FROM {settings.table} WHERE name = $1", name)
    assert row["locked_by"] == lease["locked_by"]
    for action, body in (("extend", {"lock_at_most_for": "5m"}), ("release", {})):
        r = await api.post(
            f"/v1/locks/{name}/{action}", json={"token": lease["token"], **body}, headers=bearer("billing")
        )
        assert r.status_code == 200, r.text
    assert (await api.get(f"/v1/locks/{name}", headers=bearer("billing"))).status_code == 200


async def test_name_outside_the_prefixes_is_403_and_nothing_is_written(
    api: httpx.AsyncClient, db: Any, settings: Settings, tag: str
) -> None:
    for name in (f"payments.{tag}", f"billing{tag}", f"Billing.{tag}", f"xbilling.{tag}"):
        r = await api.post(f"/v1/locks/{name}/acquire", json=acquire_body(), headers=bearer("billing"))
        assert r.status_code == 403, (name, r.text)
        error = r.json()["error"]
        assert error["code"] == "forbidden" and error["name"] == name
        assert "billing-cron" in error["message"] and SECRETS["billing"] not in r.text
        assert await db.fetchval(f"SELECT count(*) FROM {settings.table} WHERE name = $1", name) == 0
    # The same 403 whether or not the lock exists: no probing other teams' names.
    other = f"payments.{tag}"
    assert (await api.post(f"/v1/locks/{other}/acquire", json=acquire_body(), headers=bearer("ops"))).status_code == 200
    for method, path, body in (
        ("GET", f"/v1/locks/{other}", None),
        ("GET", f"/v1/locks/payments.never-{tag}", None),
        ("POST", f"/v1/locks/{other}/release", {"token": "guess"}),
        ("POST", f"/v1/locks/{other}/extend", {"token": "guess", "lock_at_most_for": "1m"}),
    ):
        r = await api.request(method, path, json=body, headers=bearer("billing"))
        assert r.status_code == 403, (method, path, r.text)


async def test_a_token_with_several_prefixes(api: httpx.AsyncClient, tag: str) -> None:
    for name, status in ((f"payments.{tag}", 200), (f"billing.eu.{tag}", 200), (f"billing.us.{tag}", 403)):
        r = await api.post(f"/v1/locks/{name}/acquire", json=acquire_body(), headers=bearer("ops"))
        assert r.status_code == status, (name, r.text)


async def test_read_only_token_reads_everything_and_writes_nothing(api: httpx.AsyncClient, tag: str) -> None:
    name = f"billing.{tag}"
    lease = (await api.post(f"/v1/locks/{name}/acquire", json=acquire_body(), headers=bearer("billing"))).json()
    r = await api.get(f"/v1/locks/{name}", headers=bearer("reader"))
    assert r.status_code == 200 and r.json()["held"] is True
    for action, body in (
        ("acquire", acquire_body()),
        ("release", {"token": lease["token"]}),
        ("extend", {"token": lease["token"], "lock_at_most_for": "1h"}),
    ):
        r = await api.post(f"/v1/locks/{name}/{action}", json=body, headers=bearer("reader"))
        assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden", r.text
        assert "read-only" in r.json()["error"]["message"]
    # Even holding the lease token, the read-only caller changed nothing.
    after = (await api.get(f"/v1/locks/{name}", headers=bearer("reader"))).json()
    assert after["lock_until"] == lease["lock_until"] and after["held"] is True


async def list_names(api: httpx.AsyncClient, who: str, **params: Any) -> list[str]:
    names: list[str] = []
    cursor = None
    while True:
        query = {**params, **({"cursor": cursor} if cursor else {})}
        r = await api.get("/v1/locks", params=query, headers=bearer(who))
        assert r.status_code == 200, r.text
        names += [i["name"] for i in r.json()["items"]]
        cursor = r.json()["next_cursor"]
        if cursor is None:
            return names


async def test_listing_shows_only_names_in_scope(api: httpx.AsyncClient, tag: str) -> None:
    made = {
        "ops": [f"payments.{tag}.{i}" for i in range(3)] + [f"billing.eu.{tag}.{i}" for i in range(3)],
        "billing": [f"billing.{tag}.{i}" for i in range(4)],
    }
    for who, names in made.items():
        for n in names:
            r = await api.post(f"/v1/locks/{n}/acquire", json=acquire_body(), headers=bearer(who))
            assert r.status_code == 200, r.text
    everything = await list_names(api, "reader", limit=1000)
    assert set(made["ops"]) | set(made["billing"]) <= set(everything)

    billing = await list_names(api, "billing", limit=2)
    assert all(n.startswith("billing.") for n in billing)
    assert set(made["billing"]) | {n for n in made["ops"] if n.startswith("billing.")} <= set(billing)

    ops = await list_names(api, "ops", limit=2)  # pages run across both ranges, in name order
    assert all(n.startswith(("payments.", "billing.eu.")) for n in ops)
    assert set(made["ops"]) <= set(ops) and ops == sorted(ops, key=str.encode)

    # A prefix filter narrows the scope; one outside it lists nothing (never someone else's names).
    assert await list_names(api, "ops", prefix=f"payments.{tag}") == sorted(n for n in made["ops"] if "payments" in n)
    assert set(await list_names(api, "ops", prefix="b")) >= {n for n in made["ops"] if n.startswith("billing.eu.")}
    assert not any(n.startswith("billing.us") for n in await list_names(api, "ops", prefix="b"))
    assert await list_names(api, "billing", prefix="payments.") == []
    assert await list_names(api, "ops", prefix=f"billing.{tag}") == []


# --- configuration -------------------------------------------------------------------------------------------


def test_toml_and_json_configurations_are_the_same() -> None:
    digest = hash_secret(SECRETS["billing"])
    toml_text = f"""
[[tokens]]
name = "billing-cron"
sha256 = "{digest}"
prefixes = ["billing.", "billing.eu."]
access = "read-write"
"""
    json_text = json.dumps(
        {"tokens": [{"name": "billing-cron", "sha256": digest, "prefixes": ["billing."], "access": "read-write"}]}
    )
    for text in (toml_text, json_text):
        auth = Authenticator(Settings(tokens=text))
        principal = asyncio.run(auth.authenticate(f"Bearer {SECRETS['billing']}"))
        assert principal.name == "billing-cron" and principal.can_write
        assert principal.prefixes == ("billing.",)  # billing.eu. is covered by billing.


@pytest.mark.parametrize(
    ("entry", "complaint"),
    [
        ({"sha256": "abc"}, "sha256"),
        ({"sha256": SECRETS["billing"]}, "sha256"),  # a secret pasted where its hash belongs
        ({"prefixes": []}, "prefixes"),
        ({"prefixes": [""]}, '"*"'),
        ({"prefixes": ["billing.*"]}, "not globs"),
        ({"prefixes": ["a/b"]}, "never match"),
        ({"prefixes": ["a\ud800"]}, "never match"),  # a lone surrogate: JSON can spell it, Postgres cannot hold it
        ({"access": "admin"}, "access"),
        ({"name": "has space"}, "name"),
        ({"scopes": ["x"]}, "scopes"),
    ],
)
def test_bad_configuration_is_refused_with_a_reason(entry: dict[str, Any], complaint: str) -> None:
    base = {"name": "t", "sha256": "a" * 64, "prefixes": ["x."], "access": "read"}
    with pytest.raises(TokenConfigError) as info:
        parse_tokens(json.dumps({"tokens": [{**base, **entry}]}), "tokens.json")
    assert complaint in str(info.value) and "tokens.json" in str(info.value)
    assert SECRETS["billing"] not in str(info.value)


def test_duplicate_names_and_secrets_are_refused() -> None:
    one = {"name": "a", "sha256": "a" * 64, "prefixes": ["x."], "access": "read"}
    for two in ({**one, "sha256": "b" * 64}, {**one, "name": "b"}):
        with pytest.raises(TokenConfigError):
            Authenticator(Settings(tokens=json.dumps({"tokens": [one, two]})))
    with pytest.raises(TokenConfigError, match="not valid JSON or TOML"):
        Authenticator(Settings(tokens="[[tokens]\nname="))
    with pytest.raises(TokenConfigError, match="cannot read"):
        Authenticator(Settings(tokens_file=Path("/nonexistent/tokens.toml")))


def test_file_and_inline_tokens_combine(tmp_path: Path) -> None:
    file = tmp_path / "tokens.json"
    file.write_text(token_config())
    inline = json.dumps(
        {"tokens": [{"name": "extra", "sha256": hash_secret("e" * 43), "prefixes": ["*"], "access": "read"}]}
    )
    auth = Authenticator(Settings(tokens_file=file, tokens=inline))
    assert auth.token_count == 4
    assert asyncio.run(auth.authenticate("bearer " + "e" * 43)).name == "extra"  # the scheme is case-insensitive
    assert asyncio.run(auth.authenticate(f"Bearer {SECRETS['ops']}")).name == "ops"


async def test_tokens_file_is_reloaded_without_restart(
    settings: Settings, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    file = tmp_path / "tokens.toml"

    def write(secret: str, name: str) -> None:
        file.write_text(
            f'[[tokens]]\nname = "{name}"\nsha256 = "{hash_secret(secret)}"\nprefixes = ["*"]\naccess = "read"\n'
        )

    old, new = "old-" + "o" * 40, "new-" + "n" * 40
    write(old, "first")
    app = create_app(settings.model_copy(update={"tokens_file": file, "tokens_reload_interval": 0.05}))

    async def status(secret: str) -> int:
        return (await client.get("/v1/locks?limit=1", headers={"Authorization": f"Bearer {secret}"})).status_code

    async def eventually(secret: str, expected: int) -> None:
        for _ in range(100):
            if await status(secret) == expected:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"still not {expected}")

    transport = httpx.ASGITransport(app=app)
    async with app.router.lifespan_context(app), httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        assert await status(old) == 200 and await status(new) == 401
        write(new, "second")
        await eventually(new, 200)
        assert await status(old) == 401
        with caplog.at_level(logging.ERROR, logger="schedlock.auth"):
            file.write_text("this is not toml = = =")
            await asyncio.sleep(0.3)
        assert await status(new) == 200, "a broken file must keep the previous tokens"
        assert "keeping the previous tokens" in caplog.text
        assert new not in caplog.text and old not in caplog.text


# --- command line ----------------------------------------------------------------------------------------------


def cli(*args: str, stdin: str = "", env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDLOCK_")}
    return subprocess.run(
        [sys.executable, "-m", "app", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env={**base, **(env or {})},
        timeout=60,
    )


def test_new_token_and_hash_token(tmp_path: Path) -> None:
    made = cli("new-token", "deploy-bot", "--prefix", "deploy.", "--prefix", "ci.", "--read-only")
    assert made.returncode == 0, made.stderr
    secret = made.stdout.strip()
    assert len(secret) >= 43 and secret not in made.stderr  # the secret goes to stdout only
    config = tomllib.loads(made.stderr)
    assert config["tokens"][0] == {
        "name": "deploy-bot",
        "sha256": hash_secret(secret),
        "prefixes": ["deploy.", "ci."],
        "access": "read",
    }
    principal = asyncio.run(Authenticator(Settings(tokens=made.stderr)).authenticate(f"Bearer {secret}"))
    assert principal.name == "deploy-bot" and not principal.can_write

    hashed = cli("hash-token", stdin=secret + "\n")
    assert hashed.returncode == 0 and hashed.stdout.strip() == hash_secret(secret)
    short = cli("hash-token", stdin="password123\n")
    assert short.returncode == 2 and "at least 32" in short.stderr and "password123" not in short.stderr
    unsendable = "x" * 40 + "\u00a0!"  # no client could present it as a bearer token
    refused = cli("hash-token", stdin=unsendable + "\n")
    assert refused.returncode == 2 and "letters, digits" in refused.stderr and unsendable not in refused.stderr

    as_json = cli("new-token", "x", "--prefix", "*", "--format", "json")
    assert json.loads(as_json.stderr)["prefixes"] == ["*"]
    bad = cli("new-token", "x", "--prefix", "jobs.*")
    assert bad.returncode == 2 and "not globs" in bad.stderr and not bad.stdout


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.3.4.5", True), ("::1", True), ("[::1]", True), ("localhost", True),
     ("0.0.0.0", False), ("::", False), ("10.0.0.5", False), ("myhost", False), ("", False)],
)  # fmt: skip
def test_loopback_detection(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_open_server_refuses_a_public_address(settings: Settings) -> None:
    env = {"SCHEDLOCK_DATABASE_URL": settings.asyncpg_dsn(), "SCHEDLOCK_TABLE": settings.table}
    r = cli("serve", "--host", "0.0.0.0", "--port", "1", env=env)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "refusing to serve on 0.0.0.0 without API tokens" in r.stderr
    bad = cli("serve", "--host", "0.0.0.0", env={**env, "SCHEDLOCK_TOKENS": "{nope"})
    assert bad.returncode == 2 and "invalid token configuration" in bad.stderr


@pytest.mark.system  # servers bound on every interface
def test_explicitly_allowed_open_server_and_token_server_on_all_interfaces(settings: Settings, tmp_path: Path) -> None:
    allowed = start_server(settings, {"SCHEDLOCK_HOST": "0.0.0.0", "SCHEDLOCK_ALLOW_UNAUTHENTICATED": "true"})
    output = stop_server(allowed)
    assert "ANYONE WHO CAN REACH THIS PORT MAY TAKE AND RELEASE EVERY LOCK" in output

    loopback = start_server(settings)
    assert "NO API TOKENS CONFIGURED" in stop_server(loopback)

    file = tmp_path / "tokens.json"
    file.write_text(token_config())
    server = start_server(settings, {"SCHEDLOCK_HOST": "0.0.0.0", "SCHEDLOCK_TOKENS_FILE": str(file)})
    try:
        name = f"billing.{uuid.uuid4().hex[:8]}"
        with httpx.Client(base_url=server.url, timeout=10) as http:
            assert http.post(f"/v1/locks/{name}/acquire", json=acquire_body()).status_code == 401
            wrong = {"Authorization": "Bearer " + SECRETS["billing"][::-1]}
            assert http.post(f"/v1/locks/{name}/acquire", json=acquire_body(), headers=wrong).status_code == 401
            r = http.post(f"/v1/locks/{name}/acquire", json=acquire_body(), headers=bearer("billing"))
            assert r.status_code == 200, r.text
            assert http.get(f"/v1/locks/payments.{name}", headers=bearer("billing")).status_code == 403
    finally:
        output = stop_server(server)
    assert "NO API TOKENS" not in output
    for secret in (*SECRETS.values(), SECRETS["billing"][::-1]):
        assert secret not in output, "a secret reached the server log"
    assert "401" in output  # the access log was on, so the check above saw real request logging


async def test_secrets_never_reach_metrics_or_error_bodies(api: httpx.AsyncClient, tag: str) -> None:
    bodies = []
    for who in SECRETS:
        for path in (f"/v1/locks/billing.{tag}", f"/v1/locks/elsewhere.{tag}", "/v1/locks"):
            bodies.append((await api.get(path, headers=bearer(who))).text)
        r = await api.post(f"/v1/locks/billing.{tag}/acquire", json=acquire_body(), headers=bearer(who))
        bodies.append(r.text)
    bodies.append((await api.get("/v1/locks", headers={"Authorization": "Bearer wrong-" + "w" * 40})).text)
    scrape = (await api.get("/metrics")).text
    assert "schedlock_lock_operations_total" in scrape
    for text in [*bodies, scrape]:
        for secret in [*SECRETS.values(), "wrong-" + "w" * 40]:
            assert secret not in text
        assert not any(hash_secret(secret) in text for secret in SECRETS.values())

"""A real OpenID provider for the suite: zitadel/oidc's example provider (tests/system/integrations/oidc/main.go
configures it), built once per session with Go's module and build caches and run on a loopback port. It issues JWT
access tokens by the client-credentials grant to the clients it is started with.

Cost (docs/auth.md, "Testing"): the first build downloads the modules and compiles them (about 1m45s on the 2-core CI
machine, 16 MB binary); later builds come from Go's caches in seconds.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.support.polyglot import ROOT, build
from tests.support.schedulers_js_go import go_env, go_tool

SOURCE = ROOT / "tests" / "system" / "integrations" / "oidc"


def build_provider(out: Path) -> float:
    """The provider built into ``out``/oidc-provider; returns the seconds the build took."""
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    build([go_tool(), "build", "-o", str(out / "oidc-provider"), "."], cwd=SOURCE, env=go_env())
    return time.monotonic() - started


@dataclass
class Provider:
    issuer: str
    process: subprocess.Popen[str]

    def access_token(self, client: str, secret: str) -> str:
        """A client-credentials grant at the provider's token endpoint: the JWT access token."""
        discovery = httpx.get(self.issuer + ".well-known/openid-configuration", timeout=10).json()
        answer = httpx.post(
            discovery["token_endpoint"],
            data={"grant_type": "client_credentials", "scope": "openid"},
            auth=(client, secret),
            timeout=10,
        )
        answer.raise_for_status()
        token: str = answer.json()["access_token"]
        return token


@contextmanager
def running(binary: Path, clients: dict[str, str], audience: str = "schedlock") -> Iterator[Provider]:
    """The provider serving ``clients`` (id -> secret) while entered."""
    args = [arg for cid, secret in clients.items() for arg in ("-client", f"{cid}:{secret}")]
    process = subprocess.Popen(
        [str(binary), "-audience", audience, *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        assert process.stdout is not None
        issuer = json.loads(process.stdout.readline())["issuer"]
        yield Provider(issuer, process)
    finally:
        process.terminate()
        process.wait(timeout=30)
        if process.stdout is not None:
            process.stdout.close()

"""Request-scoped access to what the lifespan built (settings, lock store) and to the caller's identity.

Dependencies are ``async def`` on purpose: FastAPI runs a plain ``def`` dependency in a worker thread, and that
hand-off (twice per request) was the largest single cost in the server's profile (docs/performance.md).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPBearer

from app.auth.authenticator import Authenticator, Principal
from app.history.runs import History
from app.locking.store import LockStore
from app.settings import Settings


def history_of(request: Request) -> History:
    history: History = request.app.state.history
    return history


def settings_of(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def store_of(request: Request) -> LockStore:
    store: LockStore = request.app.state.store
    return store


async def get_settings(request: Request) -> Settings:
    return settings_of(request)


async def get_store(request: Request) -> LockStore:
    return store_of(request)


async def get_history(request: Request) -> History:
    return history_of(request)


class _BearerToken(HTTPBearer):
    """Declares the bearer scheme in the OpenAPI document; authenticates with the app's Authenticator."""

    async def __call__(self, request: Request) -> Principal:  # type: ignore[override]
        return await authenticate(request, request.headers.get("authorization"))


#: Where a request's principal is kept once known: a route whose body is read first (app.api.bodies) asks twice,
#: and a quota must count the request once.
PRINCIPAL_KEY = "schedlock.principal"


async def authenticate(request: Request, authorization: str | None) -> Principal:
    """The caller behind a request's ``Authorization`` header value, by the app's Authenticator (raises
    Unauthorized, RateLimited). The lean path reads the header itself and comes here, as the bearer dependency does."""
    known: Principal | None = request.scope.get(PRINCIPAL_KEY)
    if known is not None:
        return known
    authenticator: Authenticator = request.app.state.auth
    principal = request.scope[PRINCIPAL_KEY] = await authenticator.authenticate(authorization)
    return principal


bearer = _BearerToken(
    scheme_name="bearerToken",
    description="An API token from the server's token configuration (`Authorization: Bearer <token>`). "
    "Required on /v1 when the server has tokens configured; a server without tokens serves only loopback.",
    auto_error=False,
)

SettingsDep = Annotated[Settings, Depends(get_settings)]
StoreDep = Annotated[LockStore, Depends(get_store)]
HistoryDep = Annotated[History, Depends(get_history)]
PrincipalDep = Annotated[Principal, Depends(bearer)]

"""Request-scoped access to what the lifespan built (settings, lock store, the jobs) and to the caller's identity.

Dependencies are ``async def`` on purpose: FastAPI runs a plain ``def`` dependency in a worker thread, and that
hand-off (twice per request) was the largest single cost in the server's profile (docs/performance.md).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPBearer

from app.auth.authenticator import Authenticator, Principal
from app.history.runs import History
from app.jobs.implicit import Registrar
from app.jobs.status import Jobs
from app.locking.store import LockStore
from app.settings import Settings


class Services:
    """What the routes work with: the settings (from the start), and what the lifespan builds on the database
    (``store``, ``history``, ``jobs``, ``registrar``), set once it has. One object on the app's state, handed to an
    endpoint as its ``services`` parameter (``ServicesDep``)."""

    store: LockStore
    history: History
    jobs: Jobs
    registrar: Registrar

    def __init__(self, settings: Settings, authenticator: Authenticator) -> None:
        self.settings = settings
        self.authenticator = authenticator


def services_of(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


def history_of(request: Request) -> History:
    return services_of(request).history


def settings_of(request: Request) -> Settings:
    return services_of(request).settings


def store_of(request: Request) -> LockStore:
    return services_of(request).store


async def get_services(request: Request) -> Services:
    return services_of(request)


async def get_settings(request: Request) -> Settings:
    return settings_of(request)


async def get_store(request: Request) -> LockStore:
    return store_of(request)


async def get_history(request: Request) -> History:
    return history_of(request)


class _BearerToken(HTTPBearer):
    """Declares the bearer scheme in the OpenAPI document; authenticates with the app's Authenticator."""

    async def __call__(self, request: Request) -> Principal:  # type: ignore[override]
        return await authenticate(services_of(request).authenticator, request.headers.get("authorization"))


async def authenticate(authenticator: Authenticator, authorization: str | None) -> Principal:
    """The caller behind a request's ``Authorization`` header value (raises Unauthorized,
    RateLimited, IssuerUnavailable): the one call every way
    in makes, the bearer dependency and the lock routes' handler (app.api.bodies) alike."""
    return await authenticator.authenticate(authorization)


bearer = _BearerToken(
    scheme_name="bearerToken",
    description="An API token from the server's token configuration (`Authorization: Bearer <token>`). "
    "Required on /v1 when the server has tokens configured; a server without tokens serves only loopback.",
    auto_error=False,
)

ServicesDep = Annotated[Services, Depends(get_services)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
StoreDep = Annotated[LockStore, Depends(get_store)]
HistoryDep = Annotated[History, Depends(get_history)]
PrincipalDep = Annotated[Principal, Depends(bearer)]

"""Request-scoped access to what the lifespan built (settings, lock store).

Dependencies are ``async def`` on purpose: FastAPI runs a plain ``def`` dependency in a worker thread, and that
hand-off (twice per request) was the largest single cost in the server's profile (README, Performance).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from app.locks import LockStore
from app.settings import Settings


async def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


async def get_store(request: Request) -> LockStore:
    store: LockStore = request.app.state.store
    return store


SettingsDep = Annotated[Settings, Depends(get_settings)]
StoreDep = Annotated[LockStore, Depends(get_store)]

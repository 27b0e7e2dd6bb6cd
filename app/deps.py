"""Request-scoped access to what the lifespan built (settings, lock store)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from app.locks import LockStore
from app.settings import Settings


def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def get_store(request: Request) -> LockStore:
    store: LockStore = request.app.state.store
    return store


SettingsDep = Annotated[Settings, Depends(get_settings)]
StoreDep = Annotated[LockStore, Depends(get_store)]

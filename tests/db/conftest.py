"""Fixtures of the database layer's tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.settings import Settings
from tests.support.apps import fresh_table


@pytest.fixture
async def fresh(database_url: str) -> AsyncIterator[tuple[Any, Settings]]:
    """A direct connection and settings for a table in a schema of its own, not migrated yet."""
    async with fresh_table(database_url, "mig") as pair:
        yield pair

"""The filters the read routes build (app.db.params), run on a real Postgres: a prefix and a token's scope select
names by their literal start (no LIKE patterns), an empty scope selects nothing, and no scope selects all."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from app.db.params import Params, name_filters

NAMES = ["billing.a", "billing.b", "billing_x", "reports.daily", "r%", "zeta"]


async def _select(db: Any, prefix: str | None, scope: Sequence[str] | None) -> list[str]:
    arg = Params()
    names = arg(NAMES)
    where = name_filters("n", arg, prefix=prefix, scope=scope)
    sql = f'SELECT n FROM unnest({names}::text[]) AS n WHERE {" AND ".join(where) or "true"} ORDER BY n COLLATE "C"'
    return [r["n"] for r in await db.fetch(sql, *arg.values)]


@pytest.mark.parametrize(
    ("prefix", "scope", "expected"),
    [
        (None, None, sorted(NAMES)),
        ("", None, sorted(NAMES)),
        ("billing.", None, ["billing.a", "billing.b"]),
        ("billing_", None, ["billing_x"]),  # not a LIKE pattern: "_" is itself
        ("r%", None, ["r%"]),
        (None, ["billing.", "zeta"], ["billing.a", "billing.b", "zeta"]),
        (None, [], []),
        ("billing.", ["reports."], []),
        ("billing", ["billing.b", "billing_"], ["billing.b", "billing_x"]),
    ],
)
async def test_prefix_and_scope_select_names_by_their_start(
    db: Any, prefix: str | None, scope: list[str] | None, expected: list[str]
) -> None:
    assert await _select(db, prefix, scope) == expected


def test_each_value_gets_the_next_placeholder() -> None:
    arg = Params()
    assert [arg("a"), arg(2), arg(None)] == ["$1", "$2", "$3"]
    assert arg.values == ["a", 2, None]

"""A schedlock server with a bug planted: its acquire takes a name whoever holds it (no ``lock_until <= now``
guard), the build issue 20 asks the checker to catch. ``python -m tests.chaos.planted serve ...`` is
``schedlock-server`` with the statements rewritten as the store builds them.

The only module of the harness that knows the app's insides, on purpose: a planted bug has to be planted somewhere.
"""

from __future__ import annotations

import sys
from typing import Any

from app.cli import main
from app.locking import store
from app.locking.rows import NOW

_GUARDS = (
    (f"WHERE l.lock_until <= {NOW}", "WHERE true"),  # the takeover of a row still held
    (f"WHERE NOT EXISTS (SELECT FROM seen WHERE lock_until > {NOW})", ""),  # the refusal by reading alone
    (f"s.name = i.name AND s.lock_until > {NOW}", "false"),  # the same in the batched acquire
)


def _unguard(sql: str) -> str:
    for guard, replacement in _GUARDS:
        sql = sql.replace(guard, replacement)
    return sql


_init = store.LockStore.__init__


def _planted_init(self: store.LockStore, *args: Any, **kwargs: Any) -> None:
    _init(self, *args, **kwargs)
    self._acquire_sql = _unguard(self._acquire_sql)
    self._acquire_many_sql = _unguard(self._acquire_many_sql)


store.LockStore.__init__ = _planted_init  # type: ignore[method-assign]

if __name__ == "__main__":
    sys.exit(main())

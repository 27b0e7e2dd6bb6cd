"""A schedlock server with a bug planted: its acquire takes a name whoever holds it (no ``lock_until <= now``
guard), the build issue 20 asks the checker to catch. ``python -m tests.chaos.planted serve ...`` is
``schedlock-server`` with the acquire rule replaced before the store builds its statements.

The only module of the harness that knows the app's insides, on purpose: a planted bug has to be planted somewhere.
"""

from __future__ import annotations

import sys

from app.cli import main
from app.locking import statements


def _unguarded(row: str, slot: str, *, ticks: bool = False) -> str:
    """The acquire rule with its guard gone: every row may be taken, held or not."""
    return "true"


# The acquire rule is written once (app.locking.statements.free), so it is planted once: every acquire statement
# the store builds (single, batched, slotted) takes over a row whoever holds it.
statements.free = _unguarded

if __name__ == "__main__":
    sys.exit(main())

"""The scaling phase: the throughput loads on two server processes, against the one the rest of the run measures.

In turns with that server alone: ``serve --workers 2`` (uvicorn's supervisor and two workers on one port), and two
replicas (that server and a second ``serve`` on another port, on the same database and table) with the load split
between them, one wrk each with half the clients (in the uncontended load each client keeps its own names, so the
two share none; in the contended one both draw from the same few). Each server has the pool size of the first, per
process. What is reported is how the figures scale (docs/performance.md, "The HTTP server"): nothing is asserted.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from bench import target

#: The sides of the phase, as the report names them.
SIDES = {
    "one": "one process (as above)",
    "workers": "serve --workers 2",
    "replicas": "2 replicas, 2 wrk",
}
#: Ratio name → (numerator side, denominator side): each two-process side against one process.
RATIOS = {"ratio_workers": ("workers", "one"), "ratio_replicas": ("replicas", "one")}


@contextlib.contextmanager
def servers(first: target.Server, output: Path) -> Iterator[tuple[target.Server, target.Server]]:
    """``serve --workers 2`` and a second replica of ``first``, with its settings (database, table, token, pool);
    their logs next to ``output``. Both are stopped at the end."""
    database_url, table = first.env["SCHEDLOCK_DATABASE_URL"], first.env["SCHEDLOCK_TABLE"]
    started = []
    with contextlib.ExitStack() as stack:
        for label, env in (("workers-2", {"SCHEDLOCK_WORKERS": "2"}), ("replica-2", {})):
            log = stack.enter_context(output.with_suffix(f".{label}.server.log").open("wb"))
            started.append(target.start_server(database_url, table, {**first.env, **env}, log))
            stack.callback(target.stop_server, started[-1])
        yield started[0], started[1]

"""Generate the blocking client from the asyncio one, as encode/httpcore does: _async.py is the source of _sync.py.

    python scripts/unasync_client.py          # write client/src/schedlock/_sync.py
    python scripts/unasync_client.py --check  # exit 1 with a diff when _sync.py is not what _async.py generates

Four steps. unasync's token rules drop ``async``/``await`` and rename (``AsyncLockClient`` -> ``LockClient``,
``__aenter__`` -> ``__enter__``, ``_tasks`` -> ``_threads``, ...). The two decorator types no token rule can rewrite
are replaced (SYNC_TYPES), and so are the docstrings that say something else for the blocking client
(SYNC_DOCSTRINGS). Then ruff tidies the imports and formats, so the generated file passes the same checks as a
hand-written one. tests/client/test_unasync.py runs ``--check``.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import io
import subprocess
import sys
import tempfile
import tokenize
from pathlib import Path

import unasync

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "client" / "src" / "schedlock"
SOURCE = PACKAGE / "_async.py"
TARGET = PACKAGE / "_sync.py"

#: Names unasync's own rules do not map (those turn ``AsyncX`` into ``SyncX``, ``AsyncIterator`` into ``Iterator``).
RENAMES = {
    "AsyncLockClient": "LockClient",
    "AsyncLease": "Lease",
    "AsyncClient": "Client",  # httpx
    "AsyncBaseTransport": "BaseTransport",  # httpx
    "aclose": "close",
    # asyncio.sleep -> time.sleep: _async.py calls nothing else of asyncio (the rest is in _tasks.py).
    "asyncio": "time",
    "_tasks": "_threads",
}

#: Types that unasync, renaming token by token, cannot rewrite: the jobs the decorator takes and makes.
SYNC_TYPES = {
    "Callable[P, Awaitable[R]]": "Callable[P, R]",
    "Callable[P, Coroutine[Any, Any, R | None]]": "Callable[P, R | None]",
}

HEADER = """\
# GENERATED from _async.py by scripts/unasync_client.py: do not edit. Change _async.py (its concurrency: _tasks.py,
# twin of _threads.py; the blocking docstrings: in the script), then run: python scripts/unasync_client.py
"""

#: Docstrings of the blocking client where the asyncio wording does not fit, by qualified name ("" is the module).
SYNC_DOCSTRINGS = {
    "": "The blocking client, its lease, and keep-alive on a thread.",
    "LockClient": """\
A blocking schedlock client. Thread-safe; use one per process and close it (or use ``with``).

``base_url`` and ``token`` default to ``SCHEDLOCK_URL`` (else ``http://127.0.0.1:8000``) and ``SCHEDLOCK_TOKEN``.
``holder`` is recorded in ``locked_by`` (default: host and pid). ``on_unavailable`` is the default
service-down policy of :meth:`scheduler_lock`. Pass ``transport`` or a whole ``http_client`` to control the
HTTP layer (proxies, TLS, tests); schedlock still sets the URL, auth header and timeout of each request.
""",
    "LockClient.acquire": """\
Take the lock now or raise :class:`LockHeld` (who holds it, until when); never waits.

The returned :class:`Lease` is a context manager that releases on exit. With ``keep_alive`` a thread
extends it every lock_at_most_for / 2 until release (lock_at_most_for must be >= 30s); ``on_lost`` is
called if it is lost. A network failure raises :class:`ServiceUnavailable`; acquire is not retried, since
a lost answer may have taken the lock (it then frees itself after lock_at_most_for).

To run once per tick (docs/slots.md), give ``once_per`` (a cron schedule, read in ``once_per_timezone``,
default UTC, on the database's clock) or a ``slot`` key of your own: a tick already completed raises
:class:`SlotDone`, and ``lease.slot`` says which tick the lease runs.
""",
    "LockClient.scheduler_lock": """\
Decorate a job so it runs only under the lock, like ShedLock's ``@SchedulerLock``.

When the lock is held the call is skipped: it returns None and logs at INFO who holds it. It never waits.
When the service is unavailable, ``on_unavailable`` (default: the client's, fail-closed) decides. For
``async def`` jobs use :meth:`AsyncLockClient.scheduler_lock`.

With ``once_per`` (a cron schedule, in ``once_per_timezone``), the job runs at most once per tick when it
finishes: a tick already completed is skipped too, and a job that raises leaves its tick open for another
node (docs/slots.md).
""",
    "Lease": """\
A lock held by this process. ``with lease:`` releases it on exit, also when the body raises.

Release honours lock_at_least_for (the server keeps the lock until locked_at + lock_at_least_for). A release
that fails on exit is logged, not raised: the lock then frees itself at ``lock_until``. A body that raised
releases with ``completed=False``: the lease's slot, if it has one, stays open for another run.
""",
}


def generate(source: str) -> str:
    """The text of _sync.py for this text of _async.py."""
    _check_renames(source)
    code = _unasync(source)
    code = _replace_types(code, SYNC_TYPES)
    code = _replace_docstrings(code, SYNC_DOCSTRINGS)
    # F401: the imports only the asyncio types needed. UP028: "for item in page.items: yield item" (an async
    # generator cannot "yield from") becomes "yield from"; an unsafe fix only for generators that are sent values.
    code = _ruff(code, "check", "--fix", "--unsafe-fixes", "--select", "F401,I,UP028")
    return _ruff(HEADER + code, "format")


def stale(target: Path = TARGET) -> str | None:
    """A diff of ``target`` against what _async.py generates, or None when it is current."""
    expected = generate(SOURCE.read_text())
    actual = target.read_text() if target.exists() else ""
    if actual == expected:
        return None
    diff = difflib.unified_diff(
        actual.splitlines(keepends=True), expected.splitlines(keepends=True), str(target), "generated"
    )
    return "".join(diff)


def _check_renames(source: str) -> None:
    """Fail on a rename that no longer applies: the rule would be dead, or the name was renamed in the source."""
    names = {
        token.string for token in tokenize.generate_tokens(io.StringIO(source).readline) if token.type == tokenize.NAME
    }
    unused = sorted(set(RENAMES) - names)
    if unused:
        raise SystemExit(f"unasync: these renames match nothing in {SOURCE.name}: {unused}")


def _unasync(source: str) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "_async" / SOURCE.name
        path.parent.mkdir()
        path.write_text(source)
        unasync.unasync_files([str(path)], [unasync.Rule("/_async/", "/_sync/", additional_replacements=RENAMES)])
        return (Path(tmp) / "_sync" / SOURCE.name).read_text()


def _replace_types(code: str, types: dict[str, str]) -> str:
    for asyncio_type, blocking_type in types.items():
        if asyncio_type not in code:
            raise SystemExit(f"unasync: the type {asyncio_type} is no longer in {SOURCE.name}")
        code = code.replace(asyncio_type, blocking_type)
    return code


def _replace_docstrings(code: str, docstrings: dict[str, str]) -> str:
    lines = code.splitlines(keepends=True)
    found: dict[str, ast.Expr] = {}
    _collect_docstrings(ast.parse(code), "", found)
    missing = sorted(set(docstrings) - set(found))
    if missing:
        raise SystemExit(f"unasync: no docstring to replace in the generated code for: {missing}")
    # From the bottom up, so that the line numbers of those still to do stay right.
    for qualname in sorted(docstrings, key=lambda name: found[name].lineno, reverse=True):
        node = found[qualname]
        indent = " " * node.col_offset
        text = docstrings[qualname].rstrip("\n").splitlines()
        body = [text[0], *(f"{indent}{line}" if line else "" for line in text[1:])]
        rendered = f'{indent}"""' + "\n".join(body) + (f'\n{indent}"""\n' if len(text) > 1 else '"""\n')
        assert node.end_lineno is not None
        lines[node.lineno - 1 : node.end_lineno] = [rendered]
    return "".join(lines)


def _collect_docstrings(node: ast.AST, prefix: str, found: dict[str, ast.Expr]) -> None:
    body = getattr(node, "body", [])
    first = body[0] if body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        found[prefix] = first
    for child in body:
        if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            _collect_docstrings(child, f"{prefix}.{child.name}" if prefix else child.name, found)


def _ruff(code: str, *command: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "ruff", *command, "--stdin-filename", str(TARGET), "-"],
        input=code,
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    if result.returncode != 0:
        raise SystemExit(f"unasync: ruff {command[0]} failed on the generated code:\n{result.stdout}{result.stderr}")
    return result.stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="do not write; exit 1 when _sync.py is not current")
    args = parser.parse_args(argv)
    rel = TARGET.relative_to(ROOT)
    if args.check:
        diff = stale()
        if diff is None:
            print(f"{rel} is current")
            return 0
        script = Path(__file__).resolve().relative_to(ROOT)
        print(f"{rel} is not what {SOURCE.name} generates; run: python {script}\n{diff}", file=sys.stderr)
        return 1
    TARGET.write_text(generate(SOURCE.read_text()))
    print(f"wrote {rel}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

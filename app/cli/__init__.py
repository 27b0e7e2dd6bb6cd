"""``schedlock-server``: serve the API, run the migrations, print the OpenAPI document, or make API tokens."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pydantic import ValidationError

from app import __version__
from app.cli import tokens
from app.cli.serve import migrate, openapi, serve
from app.ops.logs import configure_logging
from app.settings import Settings


def _at_least_one(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {value}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="schedlock-server",
        description="ShedLock's lock semantics over HTTP. Configuration comes from SCHEDLOCK_* environment "
        "variables (docs/configuration.md); flags override them.",
    )
    parser.add_argument("--version", action="version", version=f"schedlock-server {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser(
        "serve",
        help="serve the HTTP API",
        description="Serve the HTTP API. Without SCHEDLOCK_DATABASE_URL, starts the embedded Postgres "
        "(pgserver) in SCHEDLOCK_EMBEDDED_DATA_DIR, migrates it, and stops it on shutdown.",
    )
    serve.add_argument("--host", help="address to bind (default: SCHEDLOCK_HOST or 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port to bind (default: SCHEDLOCK_PORT or 8000)")
    serve.add_argument(
        "--workers",
        type=_at_least_one,
        help="server processes on the port, each with its own database pool and metrics (default: "
        "SCHEDLOCK_WORKERS or 1; in containers, scale with replicas instead)",
    )
    serve.add_argument(
        "--migrate",
        action="store_true",
        help="run the migrations before serving (always done for the embedded database)",
    )
    serve.add_argument(
        "--allow-unauthenticated",
        action="store_true",
        help="serve a non-loopback address without API tokens (as SCHEDLOCK_ALLOW_UNAUTHENTICATED=true); "
        "only when something in front of schedlock authenticates callers",
    )

    sub.add_parser(
        "migrate",
        help="create or adopt the lock table and bring it to the newest revision",
        description="Alembic upgrade head on SCHEDLOCK_DATABASE_URL's SCHEDLOCK_TABLE. Idempotent; "
        "adopts an existing ShedLock table without touching its rows.",
    )

    openapi = sub.add_parser("openapi", help="print the OpenAPI document")
    openapi.add_argument("--output", type=Path, help="write to this file instead of standard output")

    tokens.add_parsers(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command in tokens.COMMANDS:  # needs no configuration
        return tokens.run(args)
    try:
        settings = Settings()
    except ValidationError as exc:
        print(f"schedlock-server: invalid configuration:\n{exc}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level, settings.log_format)
    if args.command == "serve":
        flags = {"host": args.host, "port": args.port, "workers": args.workers}
        overrides = {k: v for k, v in flags.items() if v is not None}
        if args.allow_unauthenticated:
            overrides["allow_unauthenticated"] = True
        return serve(settings.model_copy(update=overrides), migrate_first=args.migrate)
    if args.command == "migrate":
        return migrate(settings)
    return openapi(settings, args.output)

"""``schedlock-server``: serve the API, run the migrations, print the OpenAPI document, or make API tokens."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
from pathlib import Path
from types import FrameType

from pydantic import SecretStr, ValidationError

from app import __version__, tokens
from app.auth import Authenticator, TokenConfigError
from app.exposure import exposure_check
from app.logs import configure_logging
from app.settings import Settings

logger = logging.getLogger("schedlock")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="schedlock-server",
        description="ShedLock's lock semantics over HTTP. Configuration comes from SCHEDLOCK_* environment "
        "variables (see the README); flags override them.",
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
        overrides = {k: v for k, v in {"host": args.host, "port": args.port}.items() if v is not None}
        if args.allow_unauthenticated:
            overrides["allow_unauthenticated"] = True
        return _serve(settings.model_copy(update=overrides), migrate=args.migrate)
    if args.command == "migrate":
        return _migrate(settings)
    return _openapi(settings, args.output)


def _migrate(settings: Settings) -> int:
    from app import migrate

    if settings.database_url is None:
        print("schedlock-server migrate: set SCHEDLOCK_DATABASE_URL", file=sys.stderr)
        return 2
    migrate.upgrade(settings)
    logger.info("table %s is at the newest schema revision", settings.table)
    return 0


def _serve(settings: Settings, *, migrate: bool) -> int:
    import uvicorn

    from app.embedded import EmbeddedPostgres
    from app.http import HttpProtocol
    from app.main import create_app

    try:
        authenticator = Authenticator(settings)
    except TokenConfigError as exc:
        print(f"schedlock-server: invalid token configuration: {exc}", file=sys.stderr)
        return 2
    problem = exposure_check(settings, authenticator.enabled)
    if problem is not None:
        level, message = problem
        logger.log(level, message)
        if level >= logging.ERROR:
            return 2
    # uvicorn shuts down gracefully on SIGTERM, then re-raises the signal to the previous handler. Python's
    # default would kill the process before the embedded Postgres is stopped; exit through `finally` instead.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    embedded = None
    if settings.database_url is None:
        embedded = EmbeddedPostgres(settings.embedded_data_dir)
        try:
            url = embedded.start()
        except ModuleNotFoundError:
            print(
                "schedlock-server: SCHEDLOCK_DATABASE_URL is not set and the embedded database (the `pgserver` "
                "package) is not installed; set SCHEDLOCK_DATABASE_URL or `pip install pgserver`",
                file=sys.stderr,
            )
            return 2
        settings = settings.model_copy(update={"database_url": SecretStr(url)})
        migrate = True
    try:
        if migrate:
            _migrate(settings)
        uvicorn.run(
            create_app(settings, freeze_gc=True, authenticator=authenticator),
            host=settings.host,
            port=settings.port,
            loop="uvloop",
            http=HttpProtocol,  # httptools, one write per response (app.http)
            log_config=None,
            # uvicorn's INFO line per request cost ~5% of the server's CPU at full load. Logging requests, where
            # wanted, is the app's job (middleware), with its own level and format.
            access_log=False,
            timeout_graceful_shutdown=10,
            server_header=False,  # no "server: uvicorn" on every answer: nothing to gain from advertising it
        )
    finally:
        if embedded is not None:
            embedded.stop()
    return 0


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


def _openapi(settings: Settings, output: Path | None) -> int:
    from app.main import create_app

    text = json.dumps(create_app(settings).openapi(), indent=2, sort_keys=False) + "\n"
    if output is None:
        sys.stdout.write(text)
    else:
        output.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

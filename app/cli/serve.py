"""The server's commands: ``serve`` (uvicorn, see app.cli.servers; with the embedded Postgres when no database URL
is set), ``migrate`` and ``openapi``. Heavy imports happen inside each command, so ``--help`` and the token commands
stay fast."""

from __future__ import annotations

import json
import logging
import signal
import sys
from pathlib import Path

from pydantic import SecretStr

from app import __version__
from app.auth.authenticator import Authenticator
from app.auth.exposure import exposure_check
from app.auth.tokens import TokenConfigError
from app.settings import Settings

logger = logging.getLogger("schedlock")


def migrate(settings: Settings) -> int:
    from app.db import migrate as migrations

    if settings.database_url is None:
        print("schedlock-server migrate: set SCHEDLOCK_DATABASE_URL", file=sys.stderr)
        return 2
    try:
        logger.info("migrate: %s", migrations.upgrade(settings))
    except migrations.UnsuitableDatabase as exc:
        print(f"schedlock-server migrate: {exc}", file=sys.stderr)
        return 2
    return 0


def serve(settings: Settings, *, migrate_first: bool) -> int:
    from app.cli import servers
    from app.db.embedded import EmbeddedPostgres

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
    # SIGTERM while the embedded Postgres starts or the migrations run: exit through `finally` (and see servers.run).
    signal.signal(signal.SIGTERM, servers.exit_on_sigterm)
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
        migrate_first = True
    try:
        if migrate_first and (status := migrate(settings)) != 0:
            return status
        _announce(settings, authenticator)
        servers.run(settings, authenticator)
    finally:
        if embedded is not None:
            embedded.stop()
    return 0


def _announce(settings: Settings, authenticator: Authenticator) -> None:
    """Where to look, and what guards the door: the first things an operator wants from the start-up log."""
    host = "localhost" if settings.host in ("0.0.0.0", "::", "") else settings.host
    base = f"http://[{host}]:{settings.port}" if ":" in host else f"http://{host}:{settings.port}"
    sources = [str(settings.tokens_file)] if settings.tokens_file else []
    if settings.tokens:
        sources.append("SCHEDLOCK_TOKENS")
    tokens = (
        f"{authenticator.token_count} API token(s) loaded from {' and '.join(sources)}" if sources else "no API tokens"
    )
    if authenticator.identity is not None:
        tokens += f", JWTs of {len(authenticator.identity.keys)} trusted issuer(s)"
    origins = ", ".join(settings.allowed_origins or ()) or "none"
    logger.info(
        "schedlock %s: API docs at %s/docs (OpenAPI at %s/openapi.json); %s; other browser origins allowed: %s",
        __version__,
        base,
        base,
        tokens,
        origins,
    )


def openapi(settings: Settings, output: Path | None) -> int:
    from app.main import create_app

    text = json.dumps(create_app(settings).openapi(), indent=2, sort_keys=False) + "\n"
    if output is None:
        sys.stdout.write(text)
    else:
        output.write_text(text)
    return 0

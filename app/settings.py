"""The one settings object. Built at start-up (never at import); tests build their own."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

_IDENT = r"[A-Za-z_][A-Za-z0-9_$]{0,62}"
_TABLE_RE = re.compile(rf"^(?:({_IDENT})\.)?({_IDENT})$")
_DEFAULT_PORTS = {"http": 80, "https": 443}


class Settings(BaseSettings):
    """Configuration from the environment (prefix ``SCHEDLOCK_``); docs/configuration.md lists every variable."""

    model_config = SettingsConfigDict(env_prefix="SCHEDLOCK_", extra="ignore")

    database_url: SecretStr | None = Field(
        default=None,
        description="postgresql:// or postgresql+asyncpg:// URL; unset means the embedded pgserver database.",
    )
    table: str = Field(default="shedlock", description="Lock table, optionally schema-qualified.")
    embedded_data_dir: Path = Field(default=Path(".schedlock/pgdata"))

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    workers: int = Field(
        default=1, ge=1, description="Server processes `serve` runs on one port, each with its own pool and metrics."
    )

    max_lock_duration: timedelta = Field(default=timedelta(days=7), gt=timedelta(0))
    list_max_limit: int = Field(default=1000, ge=1)
    # A caller whose clock runs this much ahead of the database's still gets the tick it fired for (docs/slots.md).
    # At most 30 s: half the shortest cron interval, so no request can reach past the next tick.
    slot_early_grace: timedelta = Field(default=timedelta(seconds=1), ge=timedelta(0), le=timedelta(seconds=30))

    pool_min_size: int = Field(default=2, ge=0)
    # One process keeps only a few statements in flight; more connections add Postgres backends fighting for the
    # same cores, and measured slower (docs/performance.md).
    pool_max_size: int = Field(default=8, ge=1)
    db_connect_timeout: float = Field(default=5.0, gt=0, description="Seconds to open a connection.")
    db_statement_timeout: float = Field(default=5.0, gt=0, description="Seconds a lock statement may run.")
    db_pool_timeout: float = Field(default=5.0, gt=0, description="Seconds to wait for a free connection.")
    # asyncpg prepares each statement once per connection and keeps it by name. A pooler that lends each transaction
    # another server connection (PgBouncer in transaction or statement mode) loses them: 0 sends every statement
    # unnamed (prepared and run in one transaction: a second round trip and a fresh plan each), which works through it.
    db_statement_cache_size: int = Field(
        default=100, ge=0, description="Prepared statements kept per connection; 0 behind PgBouncer's transaction mode."
    )

    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(default="INFO", description="Case-insensitive.")
    log_format: Literal["auto", "json", "human"] = Field(
        default="auto", description="json: one object per line; human: for a terminal; auto: human on a TTY."
    )

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper_level(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value

    tokens_file: Path | None = Field(default=None, description="API tokens (TOML or JSON); see docs/auth.md.")
    tokens: str | None = Field(default=None, description="API tokens inline, same format as the file.")
    tokens_reload_interval: float = Field(default=2.0, ge=0, description="Seconds between checks of tokens_file.")
    allow_unauthenticated: bool = Field(default=False, description="Serve without tokens on a non-loopback host.")
    max_body_bytes: int = Field(default=16384, ge=1024, description="Larger request bodies get 413.")
    allowed_origins: Annotated[list[str] | None, NoDecode] = Field(
        default=None,
        description="Comma-separated origins (https://host[:port]) whose browser pages may call the API (CORS); "
        "pages from any other origin but the server's own get 403. See docs/cors.md.",
    )

    @field_validator("allowed_origins", mode="before")
    @classmethod
    def _split_origins(cls, value: object) -> object:
        return [part for part in value.split(",") if part.strip()] if isinstance(value, str) else value

    @field_validator("allowed_origins")
    @classmethod
    def _check_origins(cls, origins: list[str] | None) -> list[str] | None:
        if origins is None:
            return None
        parsed = [parse_origin(text) for text in origins]
        bad = [text for text, origin in zip(origins, parsed, strict=True) if origin is None]
        if bad:
            raise ValueError(f"not an origin: {bad[0]!r}; write scheme://host[:port], e.g. https://jobs.example.com")
        return [origin for origin in parsed if origin is not None]

    # The run history (docs/history.md). Durations are ISO-8601 (P30D, PT10M).
    history_retention: timedelta = Field(
        default=timedelta(days=30), ge=timedelta(0), description="Runs older than this are deleted; PT0S keeps all."
    )
    history_prune_interval: timedelta = Field(
        default=timedelta(minutes=10), gt=timedelta(0), description="How often a replica tries to prune the history."
    )
    history_prune_batch: int = Field(default=500, ge=1, le=100_000, description="Rows deleted per statement.")
    history_flush_interval: float = Field(
        default=5.0, gt=0, le=3600, description="Seconds between writes of the skipped-attempt counts."
    )

    # Jobs (docs/jobs.md): how often a replica checks the jobs' states, and where their changes are posted.
    jobs_check_interval: float = Field(
        default=5.0, gt=0, le=3600, description="Seconds between a replica's checks of the jobs' states."
    )
    jobs_webhook_urls: Annotated[list[str] | None, NoDecode] = Field(
        default=None, description="Comma-separated http(s) URLs every job state change is POSTed to (JSON, signed)."
    )
    jobs_webhook_secret: SecretStr | None = Field(
        default=None, description="Key of the HMAC-SHA256 signature of each webhook body (X-Schedlock-Signature)."
    )
    jobs_webhook_attempts: int = Field(
        default=8, ge=1, le=100, description="Deliveries tried per change, with backoff, before it is given up."
    )

    @field_validator("jobs_webhook_urls", mode="before")
    @classmethod
    def _split_urls(cls, value: object) -> object:
        return [part.strip() for part in value.split(",") if part.strip()] if isinstance(value, str) else value

    @field_validator("jobs_webhook_urls")
    @classmethod
    def _check_urls(cls, urls: list[str] | None) -> list[str] | None:
        for url in urls or ():
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"not an http(s) URL: {url!r}")
        return urls or None

    @field_validator("table")
    @classmethod
    def _check_table(cls, value: str) -> str:
        if not _TABLE_RE.match(value):
            raise ValueError("must be an unquoted SQL identifier, optionally 'schema.table'")
        # Postgres folds unquoted names to lower case, and so does ShedLock's SQL: match it.
        return value.lower()

    @field_validator("database_url")
    @classmethod
    def _check_url(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None or not value.get_secret_value():
            return None
        scheme = value.get_secret_value().split("://", 1)[0]
        if scheme not in {"postgresql", "postgres", "postgresql+asyncpg"}:
            raise ValueError("must start with postgresql:// or postgresql+asyncpg://")
        return value

    @model_validator(mode="after")
    def _check_pool(self) -> Settings:
        if self.pool_min_size > self.pool_max_size:
            raise ValueError("pool_min_size must not exceed pool_max_size")
        if self.jobs_webhook_urls and not (self.jobs_webhook_secret and self.jobs_webhook_secret.get_secret_value()):
            raise ValueError("jobs_webhook_urls needs jobs_webhook_secret: receivers must be able to check the sender")
        return self

    @property
    def table_schema(self) -> str | None:
        match = _TABLE_RE.match(self.table)
        assert match is not None
        return match.group(1)

    @property
    def table_name(self) -> str:
        match = _TABLE_RE.match(self.table)
        assert match is not None
        return match.group(2)

    def environ(self) -> dict[str, str]:
        """These settings as the ``SCHEDLOCK_*`` variables that build them again: how ``serve`` hands its settings
        (flags and the embedded database's URL included) to worker processes it starts. Secrets come out revealed;
        unset (None) settings are left out."""
        out = {}
        for name, value in self.model_dump(mode="json").items():
            raw = getattr(self, name)
            if raw is None:
                continue
            if isinstance(raw, SecretStr):
                value = raw.get_secret_value()
            elif isinstance(value, list):  # lists are read comma-separated (allowed_origins), not as JSON
                value = ",".join(value)
            out[f"SCHEDLOCK_{name.upper()}"] = value if isinstance(value, str) else json.dumps(value)
        return out

    def asyncpg_dsn(self) -> str:
        """The database URL in the form asyncpg accepts (no SQLAlchemy driver suffix)."""
        url = self._require_url()
        scheme, rest = url.split("://", 1)
        return f"postgresql://{rest}" if scheme != "postgresql" else url

    def _require_url(self) -> str:
        if self.database_url is None:
            raise RuntimeError("no database URL: set SCHEDLOCK_DATABASE_URL or use the embedded database")
        return self.database_url.get_secret_value()


def parse_origin(text: str) -> str | None:
    """An origin as browsers send it in ``Origin``: ``scheme://host[:port]`` in lower case, without the scheme's
    default port; None when ``text`` is not one (a path, a query, credentials, another scheme, "*")."""
    try:
        parts = urlsplit(text.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname or parts.path not in ("", "/"):
        return None
    if parts.query or parts.fragment or parts.username is not None:
        return None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{parts.scheme}://{host}" + (f":{port}" if port not in (None, _DEFAULT_PORTS[parts.scheme]) else "")

"""The one settings object. Built at start-up (never at import); tests build their own."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

_IDENT = r"[A-Za-z_][A-Za-z0-9_$]{0,62}"
_TABLE_RE = re.compile(rf"^(?:({_IDENT})\.)?({_IDENT})$")


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

    max_lock_duration: timedelta = Field(default=timedelta(days=7), gt=timedelta(0))
    list_max_limit: int = Field(default=1000, ge=1)

    pool_min_size: int = Field(default=2, ge=0)
    # One process keeps only a few statements in flight; more connections add Postgres backends fighting for the
    # same cores, and measured slower (docs/performance.md).
    pool_max_size: int = Field(default=8, ge=1)
    db_connect_timeout: float = Field(default=5.0, gt=0, description="Seconds to open a connection.")
    db_statement_timeout: float = Field(default=5.0, gt=0, description="Seconds a lock statement may run.")
    db_pool_timeout: float = Field(default=5.0, gt=0, description="Seconds to wait for a free connection.")

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

    def asyncpg_dsn(self) -> str:
        """The database URL in the form asyncpg accepts (no SQLAlchemy driver suffix)."""
        url = self._require_url()
        scheme, rest = url.split("://", 1)
        return f"postgresql://{rest}" if scheme != "postgresql" else url

    def sqlalchemy_url(self) -> str:
        """The database URL in the form SQLAlchemy's async engine accepts."""
        return "postgresql+asyncpg://" + self.asyncpg_dsn().split("://", 1)[1]

    def _require_url(self) -> str:
        if self.database_url is None:
            raise RuntimeError("no database URL: set SCHEDLOCK_DATABASE_URL or use the embedded database")
        return self.database_url.get_secret_value()

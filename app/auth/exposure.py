"""The start-up safety check: an API without tokens is served only where nobody else can reach it."""

from __future__ import annotations

import ipaddress
import logging

from app.settings import Settings


def is_loopback(host: str) -> bool:
    """True only for addresses nobody else can reach: 127.0.0.0/8, ::1 and the name localhost."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name could resolve to anything: treat it as exposed


def exposure_check(settings: Settings, auth_enabled: bool) -> tuple[int, str] | None:
    """None when tokens protect the API; else (log level, message). ERROR means: refuse to start."""
    if auth_enabled:
        return None
    if is_loopback(settings.host):
        return (
            logging.WARNING,
            f"NO API TOKENS CONFIGURED: anyone who can reach {settings.host}:{settings.port} may take and release "
            "every lock. Serving on loopback only. Set SCHEDLOCK_TOKENS_FILE (see docs/auth.md).",
        )
    if settings.allow_unauthenticated:
        return (
            logging.WARNING,
            f"NO API TOKENS CONFIGURED and serving on {settings.host}: ANYONE WHO CAN REACH THIS PORT MAY TAKE AND "
            "RELEASE EVERY LOCK (allowed by SCHEDLOCK_ALLOW_UNAUTHENTICATED / --allow-unauthenticated).",
        )
    return (
        logging.ERROR,
        f"refusing to serve on {settings.host} without API tokens: anyone could take and release every lock. "
        "Configure SCHEDLOCK_TOKENS_FILE (see docs/auth.md), bind 127.0.0.1, or set "
        "SCHEDLOCK_ALLOW_UNAUTHENTICATED=true if something in front of schedlock authenticates callers.",
    )

"""``schedlock-server new-token`` and ``hash-token``: make API tokens and the configuration lines for them.

The secret goes to standard output and nowhere else; the configuration (which holds only its hash) goes to
standard error, so ``TOKEN=$(schedlock-server new-token billing-cron --prefix billing. 2>>tokens.toml)``
keeps the two apart.
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
from typing import Any

from pydantic import ValidationError

from app.auth.tokens import B64TOKEN, MIN_SECRET_LENGTH, TokenEntry, hash_secret

COMMANDS = ("new-token", "hash-token")


def add_parsers(sub: Any) -> None:
    new = sub.add_parser(
        "new-token",
        help="generate an API token: the secret on stdout, its configuration entry on stderr",
        description="Generate a random 256-bit API token. Prints the secret on standard output (hand it to the "
        "job; it is shown only now) and the entry for SCHEDLOCK_TOKENS_FILE, which holds only its SHA-256, on "
        "standard error.",
    )
    new.add_argument("name", help="token name, recorded in locked_by (letters, digits, . _ : @ -)")
    new.add_argument(
        "--prefix",
        action="append",
        required=True,
        dest="prefixes",
        help='lock names this token may use start with this (repeatable; "*" for every name)',
    )
    new.add_argument("--read-only", action="store_true", help="may only read locks, never acquire/release/extend")
    new.add_argument("--admin", action="store_true", help="may also force-release locks within its prefixes")
    new.add_argument("--format", choices=("toml", "json"), default="toml", help="format of the entry (toml)")

    sub.add_parser(
        "hash-token",
        help="print the SHA-256 of a secret read from stdin, for the tokens file",
        description=f"Read one secret from standard input (not an argument: it would show in `ps` and shell "
        f"history) and print the hex SHA-256 the tokens file wants. Refuses secrets shorter than "
        f"{MIN_SECRET_LENGTH} characters: only high-entropy secrets are safe behind a fast hash.",
    )


def run(args: argparse.Namespace) -> int:
    if args.command == "hash-token":
        return _hash_token()
    return _new_token(args)


def _hash_token() -> int:
    secret = sys.stdin.readline().strip(" \t\r\n")
    if len(secret) < MIN_SECRET_LENGTH:
        print(
            f"schedlock-server hash-token: a secret needs at least {MIN_SECRET_LENGTH} characters of randomness; "
            "use `schedlock-server new-token` or `openssl rand -base64 32`",
            file=sys.stderr,
        )
        return 2
    if not B64TOKEN.fullmatch(secret):  # RFC 6750: any other secret could never be presented
        print(
            "schedlock-server hash-token: a bearer secret may only hold letters, digits and - . _ ~ + / "
            "(and = at the end); use `schedlock-server new-token` or `openssl rand -base64 32`",
            file=sys.stderr,
        )
        return 2
    print(hash_secret(secret))
    return 0


def _new_token(args: argparse.Namespace) -> int:
    secret = secrets.token_urlsafe(32)
    try:
        entry = TokenEntry(
            name=args.name,
            sha256=hash_secret(secret),
            prefixes=args.prefixes,
            access="read" if args.read_only else "read-write",
            admin=args.admin,
        )
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'token'}: {err['msg'].removeprefix('Value error, ')}"
            for err in exc.errors(include_input=False)
        )
        print(f"schedlock-server new-token: {problems}", file=sys.stderr)
        return 2
    if args.format == "json":
        fields = {"name": entry.name, "sha256": entry.sha256, "prefixes": entry.prefixes, "access": entry.access}
        config = json.dumps(fields | ({"admin": True} if entry.admin else {}), indent=2)
    else:
        prefixes = ", ".join(json.dumps(p, ensure_ascii=False) for p in entry.prefixes)
        config = (
            f"[[tokens]]\nname = {json.dumps(entry.name, ensure_ascii=False)}\nsha256 = {json.dumps(entry.sha256)}\n"
            f"prefixes = [{prefixes}]\naccess = {json.dumps(entry.access)}\n"
            + ("admin = true\n" if entry.admin else "")
        )
    print(config, file=sys.stderr)
    print(secret)
    return 0

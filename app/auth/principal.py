"""Who is calling and what it may do: a Principal, made from a token's entry or from a JWT by a binding."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from app.auth.quotas import Quota
from app.auth.tokens import ALL_NAMES, Policy
from app.errors import Forbidden


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the token's name (or the name a binding made of a JWT's claims) and what it may do. ``name``
    None means the server has no tokens."""

    name: str | None
    prefixes: tuple[str, ...] | None  # None: every name
    can_write: bool
    is_admin: bool = False  # may force-release (within its prefixes)
    quota: Quota | None = None  # requests per second and burst; None: no limit
    issuer: str | None = None  # the [[issuers]] entry whose JWT this principal presented; None: a static token

    def may_use(self, lock_name: str) -> bool:
        return self.prefixes is None or lock_name.startswith(self.prefixes)

    def require(self, lock_name: str, *, write: bool) -> None:
        """Raise Forbidden unless this caller may read (or write) ``lock_name``."""
        if not self.may_use(lock_name):
            allowed = ", ".join(repr(p) for p in self.prefixes or ())
            raise Forbidden(
                f"token {self.name!r} may not use lock {lock_name!r}; its names start with {allowed}",
                name=lock_name,
            )
        if write and not self.can_write:
            raise Forbidden(f"token {self.name!r} is read-only", name=lock_name)

    def require_admin(self, lock_name: str) -> None:
        """Raise Forbidden unless this caller may force-release ``lock_name``."""
        self.require(lock_name, write=True)
        if not self.is_admin:
            raise Forbidden(f"token {self.name!r} is not an admin token; force-release needs one", name=lock_name)


#: The caller when the server runs without tokens.
OPEN = Principal(name=None, prefixes=None, can_write=True, is_admin=True)


def principal_of(name: str, prefixes: Iterable[str], policy: Policy, issuer: str | None = None) -> Principal:
    """The principal ``name`` with ``policy``, its ``prefixes`` given apart (a binding's are filled from claims)."""
    prefixes = list(prefixes)
    kept: tuple[str, ...] | None
    if ALL_NAMES in prefixes:
        kept = None
    else:
        # Drop prefixes another one already covers ("billing." covers "billing.eu."): fewer ranges in SQL.
        found: list[str] = []
        for prefix in sorted(set(prefixes)):
            if not any(prefix.startswith(k) for k in found):
                found.append(prefix)
        kept = tuple(found)
    return Principal(
        name=name,
        prefixes=kept,
        can_write=policy.access == "read-write",
        is_admin=policy.admin,
        quota=policy.quota,
        issuer=issuer,
    )

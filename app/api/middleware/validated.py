"""What a lean endpoint has validated before, so that the same input passes again without being validated again.

A job's acquire is the same request every time it runs, on every node: the same lock name, the same
``Content-Type``, the same body bytes (its ``lock_at_most_for``, its holder). Reading that body (orjson), validating
it (pydantic, with the duration parser) and checking the name's rule again and again was a share of the server's CPU
per request worth saving (docs/performance.md, "Validated inputs"). Each of the three is a pure function of its
input, so what passed once passes again:

- a ``Content-Type`` value that said JSON;
- a lock name its route's rule took unchanged;
- the body bytes of a model whose instances are frozen, with the instance validated from them: frozen, so the
  requests that share it cannot change it. Bodies that carry a lease token (release, extend) are not frozen and
  never kept: each is new, and a secret.

Only inputs that passed are kept, never a failure, so every bad input is validated (and answered) as before. Each
record is bounded (small inputs only, a fixed number, forgotten all at once when full): a caller inventing names
or bodies costs at most this memory. The endpoint's own checks (the caller's rights, the server's maximum duration)
run on every request, as before. tests/api/test_validated.py.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

#: Bounds: distinct values kept of each (forgotten all at once past this), and the largest body kept.
TYPES_KEPT = 16
NAMES_KEPT = 4096
BODIES_KEPT = 256
BODY_BYTES_KEPT = 512


class Validated:
    """The inputs one lean endpoint has validated (see the module). ``body_model``: the endpoint's body model, or
    None; its bodies are kept only if its instances are frozen."""

    __slots__ = ("_bodies", "_names", "_types")

    def __init__(self, body_model: type[BaseModel] | None) -> None:
        self._types: set[str] = set()
        self._names: set[str] = set()
        keeps = body_model is not None and body_model.model_config.get("frozen") is True
        self._bodies: dict[bytes, BaseModel] | None = {} if keeps else None

    def has_type(self, content_type: str | None) -> bool:
        return content_type in self._types

    def has_name(self, name: str) -> bool:
        return name in self._names

    def body(self, raw: bytes) -> BaseModel | None:
        """The model validated from exactly these bytes before, or None."""
        return None if self._bodies is None else self._bodies.get(raw)

    def passed(self, content_type: str | None, name: str, validated_name: Any, raw: bytes, body: Any) -> None:
        """Keep what passed: the request's ``Content-Type`` (it had a body), its name (when the rule took it
        unchanged), its body bytes and the model validated from them."""
        if raw and content_type is not None:
            _add(self._types, content_type, TYPES_KEPT)
        if validated_name == name:
            _add(self._names, name, NAMES_KEPT)
        bodies = self._bodies
        if bodies is not None and isinstance(body, BaseModel) and 0 < len(raw) <= BODY_BYTES_KEPT:
            if len(bodies) >= BODIES_KEPT:
                bodies.clear()
            bodies[raw] = body


def _add(kept: set[str], value: str, bound: int) -> None:
    if len(kept) >= bound:
        kept.clear()
    kept.add(value)

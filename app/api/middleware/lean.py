"""A lean way into the lock operations' endpoints, for the hot path.

FastAPI's generic request handling (dependency resolution, parameter and body binding, exit stacks, the walk over
every route) costs more CPU than the lock statement itself (docs/performance.md). The lock operations have
one simple shape: a lock name in the path, maybe a JSON body, the caller's identity. This middleware serves
exactly those routes itself:

- it matches with each route's own pattern (``route.matches``), so paths are declared once, in the router;
- it authenticates with the same dependency the route declares (``app.api.deps.bearer``), before any validation, as
  FastAPI does;
- it reads the body with the same function (app.api.bodies: JSON only, else 415), and validates the name and the
  body with the same rule and model (errors located as FastAPI locates them);
- it calls the route's own endpoint function, and answers errors through ``app.api.errors``.

The routes stay ordinary FastAPI routes: they document the API (OpenAPI, /docs), and without this middleware
FastAPI serves them the generic way with the same results (tests/test_lean.py compares the two).
"""

from __future__ import annotations

import typing
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import BaseModel, TypeAdapter, ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.bodies import read_json
from app.api.deps import bearer
from app.api.errors import known_error_response

Endpoint = Callable[..., Awaitable[Response]]
#: Set in the scope of every request this middleware serves.
SERVED_KEY = "schedlock.lean"


class LeanRoutes:
    """ASGI middleware serving ``routes`` (endpoints taking ``name``, ``principal``, ``request`` and optionally a
    ``body`` model) without FastAPI's generic machinery; every other request goes on to ``app``."""

    def __init__(self, app: ASGIApp, routes: Iterable[APIRoute]) -> None:
        self.app = app
        self.routes = [(route, _LeanEndpoint(route.endpoint)) for route in routes]
        # The literal text before the first path parameter ("/v1/locks/"): a cheap test before any pattern.
        prefixes = {route.path_format.split("{", 1)[0] for route, _ in self.routes}
        assert len(prefixes) == 1, f"lean routes must share one prefix, got {prefixes}"
        self._prefix = prefixes.pop()
        # The route whose literal ending (".../acquire") the path has is tried first. At most one of these routes
        # can match a request fully (their endings and methods differ), so the order changes only the cost.
        endings = {_ending(route) for route, _ in self.routes}
        self._tries = {ending: sorted(self.routes, key=lambda pair: _ending(pair[0]) != ending) for ending in endings}
        self._default_tries = self._tries.get("", self.routes)  # a path ending in a name: the read route first

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith(self._prefix):
            path = scope["path"]
            tries = self._tries.get(path[path.rfind("/") :], self._default_tries)
            for route, endpoint in tries:
                match, child_scope = route.matches(scope)
                if match is Match.FULL:
                    scope.update(child_scope)
                    scope[SERVED_KEY] = True  # what the tests' witness looks for (tests/support/apps.py)
                    response = await endpoint(Request(scope, receive))
                    await response(scope, receive, send)
                    return
        await self.app(scope, receive, send)


def _ending(route: APIRoute) -> str:
    """The literal text after the route's last path parameter: "/acquire", or "" for ``/v1/locks/{name}``."""
    return route.path_format.rsplit("}", 1)[1]


class _LeanEndpoint:
    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        hints = typing.get_type_hints(endpoint)
        expected = {"name", "principal", "request", "return"} | ({"body"} if "body" in hints else set())
        assert set(hints) == expected, f"{endpoint.__name__} has parameters the lean path cannot bind: {hints}"
        self.body_model: type[BaseModel] | None = hints.get("body")
        # The name's rule is the one the route declares (writes: the API's name rule; reads: any row's name).
        self.name = TypeAdapter(typing.get_type_hints(endpoint, include_extras=True)["name"]).validate_python

    def _validate_body(self, data: Any) -> BaseModel:
        assert self.body_model is not None
        return self.body_model.model_validate(data, from_attributes=True)  # as FastAPI validates a body

    async def __call__(self, request: Request) -> Response:
        try:
            principal = await bearer(request)
            kwargs: dict[str, Any] = {"principal": principal, "request": request}
            raw = await request.body() if self.body_model is not None else b""
            # A body that is not declared JSON, or not JSON, is refused before any field is looked at (as FastAPI).
            data = read_json(request.headers.get("content-type"), raw) if raw else None
            errors: list[Any] = []
            kwargs["name"] = _validate(self.name, request.path_params["name"], ("path", "name"), errors)
            if self.body_model is not None:
                if not raw:
                    errors.append({"type": "missing", "loc": ("body",), "msg": "Field required", "input": None})
                else:  # validated from Python objects, as FastAPI does, so the messages are the same
                    kwargs["body"] = _validate(self._validate_body, data, ("body",), errors)
            if errors:
                raise RequestValidationError(errors)
            return await self.endpoint(**kwargs)
        except Exception as exc:
            response = known_error_response(exc, request.scope)
            if response is None:
                raise
            return response


def _validate(validator: Callable[[Any], Any], value: Any, loc: tuple[str, ...], errors: list[Any]) -> Any:
    try:
        return validator(value)
    except ValidationError as exc:
        errors.extend({**e, "loc": (*loc, *e["loc"])} for e in exc.errors(include_url=False))
        return None

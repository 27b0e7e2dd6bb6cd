"""A lean way into the lock operations' endpoints, for the hot path.

FastAPI's generic request handling (dependency resolution, parameter and body binding, exit stacks, the walk over
every route) costs more CPU than the lock statement itself (docs/performance.md). The lock operations have
one simple shape: a lock name in the path, maybe a JSON body, the caller's identity. This middleware serves
exactly those routes itself:

- it matches with each route's own pattern (``route.matches``), so paths are declared once, in the router; a POST
  to a path ending in ``/acquire``, ``/release`` or ``/extend`` is matched without the pattern's regular expression,
  to the same result (``_match_post``);
- it authenticates with what the route's dependency (``app.api.deps.bearer``) uses, the app's Authenticator on the
  ``Authorization`` header, before any validation, as FastAPI does;
- it reads the body with the same function (app.api.bodies: JSON only, else 415), and validates the name and the
  body with the same rule and model (errors located as FastAPI locates them); a content type, name and body that
  each passed before pass again without it (app.api.middleware.validated);
- it calls the route's own endpoint function, and answers errors through ``app.api.errors``.

The routes stay ordinary FastAPI routes: they document the API (OpenAPI, /docs), and without this middleware
FastAPI serves them the generic way with the same results (tests/api/test_lean.py compares the two). Served by
app.api.protocol, most of their POSTs do not even come this far: the direct lane (app.api.direct) serves them from
the protocol with this middleware's table and endpoints (``plain_post``), without the ASGI layers.
"""

from __future__ import annotations

import typing
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import BaseModel, TypeAdapter, ValidationError
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Match
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.bodies import read_json
from app.api.deps import authenticate
from app.api.errors import known_error_response
from app.api.middleware.validated import Validated

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
        self.prefix = self._prefix  # what the direct lane (app.api.direct) tests a path against first
        # The route whose literal ending (".../acquire") the path has is tried first. At most one of these routes
        # can match a request fully (their endings and methods differ), so the order changes only the cost.
        endings = {_ending(route) for route, _ in self.routes}
        self._tries = {ending: sorted(self.routes, key=lambda pair: _ending(pair[0]) != ending) for ending in endings}
        self._default_tries = self._tries.get("", self.routes)  # a path ending in a name: the read route first
        # POST routes by their literal ending, each matched without its pattern (_match_post).
        self._posts = {_ending(r): (r, e) for r, e in self.routes if _plain_post(r, self._prefix)}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith(self._prefix):
            path = scope["path"]
            ending = path[path.rfind("/") :]
            served = self._match_post(scope, path, ending)
            if served is None:
                for route, endpoint in self._tries.get(ending, self._default_tries):
                    match, child_scope = route.matches(scope)
                    if match is Match.FULL:
                        scope.update(child_scope)
                        served = endpoint
                        break
            if served is not None:
                scope[SERVED_KEY] = True  # what the tests' witness looks for (tests/support/apps.py)
                response = await served(Request(scope, receive))
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _match_post(self, scope: Scope, path: str, ending: str) -> _LeanEndpoint | None:
        """``route.matches`` for a POST to a path (starting with the routes' prefix) that ends exactly in a POST
        route's ending, without the pattern's regular expression: ``<prefix>{name}<ending>`` with a name that may
        be any text (app.api.routes.locks' ``lockpath``) matches such a path, the name being what lies between.
        Anything else (another method, a root path, a path too short to hold both) is left to ``route.matches``;
        tests/api/test_lean.py compares the two. The child scope is APIRoute.matches': the endpoint, the name, the route.
        """
        if scope["method"] != "POST" or scope.get("root_path"):
            return None
        found = self.plain_post(path, ending)
        if found is None:
            return None
        route, endpoint, name = found
        scope["endpoint"] = route.endpoint
        scope["path_params"] = {**scope.get("path_params", {}), "name": name}
        scope["route"] = route
        return endpoint

    def plain_post(self, path: str, ending: str) -> tuple[APIRoute, _LeanEndpoint, str] | None:
        """The POST route a path (starting with the routes' prefix, ``ending`` its text from the last '/') names,
        its endpoint and the lock name, when the path ends exactly in that route's ending and has room for the
        prefix too; else None. What ``_match_post`` and the direct lane (app.api.direct) match with."""
        found = self._posts.get(ending)
        if found is None or len(path) < len(self._prefix) + len(ending):
            return None
        return found[0], found[1], path[len(self._prefix) : len(path) - len(ending)]


#: A path parameter's pattern that matches any text (app.api.routes.locks' ``lockpath``).
_ANYTHING = r"[\s\S]*"


def _plain_post(route: APIRoute, prefix: str) -> bool:
    """Whether ``route`` is ``POST <prefix>{name}<ending>`` with a name that may be any text and a literal ending:
    then a path matches it exactly when it starts with the prefix, ends with the ending and has room for both."""
    ending = _ending(route)
    return (
        route.methods == {"POST"}
        and route.path_format == f"{prefix}{{name}}{ending}"
        and getattr(route.param_convertors.get("name"), "regex", None) == _ANYTHING
    )


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
        self.validated = Validated(self.body_model)  # what passed before passes again without validation

    def _validate_body(self, data: Any) -> BaseModel:
        assert self.body_model is not None
        return self.body_model.model_validate(data, from_attributes=True)  # as FastAPI validates a body

    async def __call__(self, request: Request) -> Response:
        try:
            authorization, content_type = _two_headers(request.scope["headers"])
            principal = await authenticate(request, authorization)  # what the route's bearer dependency does
            kwargs: dict[str, Any] = {"principal": principal, "request": request}
            raw = await _body(request) if self.body_model is not None else b""
            name = request.path_params["name"]
            validated = self.validated
            known = validated.body(raw) if raw else None
            if known is not None and validated.has_type(content_type) and validated.has_name(name):
                # Each passed before, and validating them again would give the same (app.api.middleware.validated).
                return await self.endpoint(name=name, body=known, **kwargs)
            # A body that is not declared JSON, or not JSON, is refused before any field is looked at (as FastAPI).
            data = read_json(content_type, raw) if raw else None
            errors: list[Any] = []
            kwargs["name"] = _validate(self.name, name, ("path", "name"), errors)
            if self.body_model is not None:
                if not raw:
                    errors.append({"type": "missing", "loc": ("body",), "msg": "Field required", "input": None})
                else:  # validated from Python objects, as FastAPI does, so the messages are the same
                    kwargs["body"] = _validate(self._validate_body, data, ("body",), errors)
            if errors:
                raise RequestValidationError(errors)
            validated.passed(content_type, name, kwargs["name"], raw, kwargs.get("body"))
            return await self.endpoint(**kwargs)
        except Exception as exc:
            response = known_error_response(exc, request.scope)
            if response is None:
                raise
            return response


def _two_headers(headers: Iterable[tuple[bytes, bytes]]) -> tuple[str | None, str | None]:
    """``Authorization`` and ``Content-Type`` in one pass over the request's headers, each the first one sent (as
    Starlette's ``request.headers.get`` gives it): the lean path needs no other header."""
    authorization = content_type = None
    for key, value in headers:
        if key == b"authorization":
            if authorization is None:
                authorization = value.decode("latin-1")
        elif key == b"content-type" and content_type is None:
            content_type = value.decode("latin-1")
    return authorization, content_type


async def _body(request: Request) -> bytes:
    """``await request.body()``, without its async generator for the usual body of one message; kept on the
    request as Starlette keeps it. A client gone before the end raises ClientDisconnect (answered 499)."""
    chunks: list[bytes] = []
    while True:
        message = await request.receive()
        if message["type"] != "http.request":
            raise ClientDisconnect()
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    vars(request)["_body"] = body
    return body


def _validate(validator: Callable[[Any], Any], value: Any, loc: tuple[str, ...], errors: list[Any]) -> Any:
    try:
        return validator(value)
    except ValidationError as exc:
        errors.extend({**e, "loc": (*loc, *e["loc"])} for e in exc.errors(include_url=False))
        return None

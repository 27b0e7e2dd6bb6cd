"""The one place a request body is read and validated, and a route's caller authenticated on the way.

``JsonBodyRoute`` is an APIRoute (FastAPI's documented extension point, "Custom Request and APIRoute class") whose
handler binds the endpoints of the API's simple shape itself: path parameters, a ``body`` model, the caller
(``principal``), ``services`` and the ``request``. Every route that takes a body has that shape (construction fails
otherwise), and so do the lock operations: FastAPI's generic handling (dependency resolution, exit stacks, a
second parse of the same body) cost more CPU than the lock statement (docs/performance.md). The routes stay
FastAPI routes, declared once: the API document and /docs come from them unchanged, and the router matches them.
A bound route serves its requests itself (``JsonBodyRoute.handle``, Starlette's public route method), without
FastAPI's request/response wrapper, whose exit stacks and exception wrapper a bound endpoint does not use.

The handler does, in FastAPI's order: authenticate (``app.api.deps.authenticate``, 401 before anything else); read
the body once; refuse a body not declared JSON (415) or not JSON (422 ``json_invalid``); validate the path
parameters by the types the endpoint declares and the body by its pydantic model, from Python objects as FastAPI
does, errors located as FastAPI locates them (``("path", "name")``, ``("body", ...)``); then call the endpoint.
Errors are answered by ``app.api.errors``, the one mapping.

Why JSON must be declared: a browser sends ``text/plain``, form-encoded and multipart bodies to any site without
asking first (a CORS "simple" request), while a JSON body needs a preflight, which the origin rule (app.api.edge)
refuses for foreign pages. Accepting JSON under any label let any web page the operator opened take or release
locks on a loopback server without tokens. The body is read by orjson: UTF-8 only, no NaN, no lone surrogates
(text Postgres could not store), where ``json.loads`` takes all three (and UTF-16).
"""

from __future__ import annotations

import re
import typing
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any

import orjson
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import BaseModel, TypeAdapter, ValidationError
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from app.api.deps import Services, authenticate
from app.api.errors import known_error_response
from app.auth.authenticator import Principal
from app.errors import UnsupportedMediaType

# RFC 9110 media type, parameters ignored (JSON has no charset: it is UTF-8). ASCII only, matched whole.
_JSON_TYPE = re.compile(r"application/(?:[!#$%&'*+.^_`|~0-9a-z-]*\+)?json", re.ASCII | re.IGNORECASE)
#: The parameters the handler binds, besides the route's path parameters.
_BOUND = frozenset({"body", "principal", "services", "request"})


def read_json(content_type: str | None, raw: bytes) -> Any:
    """The JSON value of a non-empty body. Raises UnsupportedMediaType unless ``content_type`` says JSON, and
    RequestValidationError (``json_invalid``, located at the body, as FastAPI locates it) when it is not JSON."""
    media_type = None if content_type is None else content_type.split(";", 1)[0].strip(" \t")
    if media_type is None or not _JSON_TYPE.fullmatch(media_type):
        shown = "none" if media_type is None else repr(media_type[:100])
        raise UnsupportedMediaType(f"the body must be JSON, sent with 'Content-Type: application/json' (got {shown})")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise RequestValidationError([{"type": "json_invalid", "loc": ("body",), "msg": "JSON decode error"}]) from None


class JsonBodyRoute(APIRoute):
    """An APIRoute whose endpoint, if it has the simple shape (see the module), is bound by ``Binding``; any other
    endpoint (query parameters, other dependencies) is FastAPI's to bind, and must not take a body."""

    binding: Binding | None = None

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        hints = typing.get_type_hints(self.endpoint, include_extras=True)
        hints.pop("return", None)
        paths = {p.name for p in self.dependant.path_params}
        if set(hints) - _BOUND - paths or "principal" not in hints:
            assert self.body_field is None, f"{self.endpoint.__name__}: a body is read by Binding only"
            return super().get_route_handler()
        self.binding = Binding(self.endpoint, hints, paths)
        return self.binding.handle

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A bound endpoint is served here, as an ASGI app: FastAPI's request/response wrapper (a ``Request``, two
        exit stacks, an exception wrapper) adds nothing to what ``Binding`` does, and an error it does not answer
        goes to the app's error layers all the same. A method the route does not take is FastAPI's to refuse."""
        binding = self.binding
        if binding is None or (self.methods is not None and scope["method"] not in self.methods):
            await super().handle(scope, receive, send)
            return
        response = await binding.answer(scope, receive)
        await response(scope, receive, send)


class Binding:
    """The handler of one simple endpoint: authenticate, read, validate, call (see the module)."""

    def __init__(self, endpoint: Callable[..., Awaitable[Response]], hints: dict[str, Any], paths: set[str]) -> None:
        self.endpoint = endpoint
        self.paths = [(name, TypeAdapter(hints[name]).validate_python) for name in sorted(paths)]
        body = hints.get("body")
        self.body_model: type[BaseModel] | None = typing.get_args(body)[0] if _annotated(body) else body
        self.wants_services = "services" in hints
        self.wants_request = "request" in hints
        assert _annotated(hints["principal"]) and typing.get_args(hints["principal"])[0] is Principal

    async def handle(self, request: Request) -> Response:
        return await self.answer(request.scope, request.receive)

    async def answer(self, scope: Scope, receive: Receive) -> Response:
        try:
            authorization, content_type = _two_headers(scope["headers"])
            services: Services = scope["app"].state.services
            kwargs: dict[str, Any] = {"principal": await authenticate(services.authenticator, authorization)}
            raw = await _body(receive) if self.body_model is not None else b""
            # A body that is not declared JSON, or not JSON, is refused before any field is looked at (as FastAPI).
            data = read_json(content_type, raw) if raw else None
            errors: list[Any] = []
            params = scope["path_params"]
            for name, validate in self.paths:
                kwargs[name] = _validate(validate, params[name], ("path", name), errors)
            if self.body_model is not None:
                if not raw:
                    errors.append({"type": "missing", "loc": ("body",), "msg": "Field required", "input": None})
                else:  # validated from Python objects, as FastAPI does, so the messages are the same
                    kwargs["body"] = _validate(self._validate_body, data, ("body",), errors)
            if errors:
                raise RequestValidationError(errors)
            if self.wants_services:
                kwargs["services"] = services
            if self.wants_request:
                kwargs["request"] = Request(scope, receive)
            return await self.endpoint(**kwargs)
        except Exception as exc:
            response = known_error_response(exc, scope)
            if response is None:
                raise
            return response

    def _validate_body(self, data: Any) -> BaseModel:
        assert self.body_model is not None
        return self.body_model.model_validate(data, from_attributes=True)  # as FastAPI validates a body


def _annotated(hint: Any) -> bool:
    return typing.get_origin(hint) is typing.Annotated


def _two_headers(headers: Iterable[tuple[bytes, bytes]]) -> tuple[str | None, str | None]:
    """``Authorization`` and ``Content-Type`` in one pass over the request's headers, each the first one sent (as
    Starlette's ``request.headers.get`` gives it)."""
    authorization = content_type = None
    for key, value in headers:
        if key == b"authorization":
            if authorization is None:
                authorization = value.decode("latin-1")
        elif key == b"content-type" and content_type is None:
            content_type = value.decode("latin-1")
    return authorization, content_type


async def _body(receive: Receive) -> bytes:
    """The whole body, read from the ASGI messages once. A client gone before the end raises ClientDisconnect
    (answered 499)."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise ClientDisconnect()
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _validate(validator: Callable[[Any], Any], value: Any, loc: tuple[str, ...], errors: list[Any]) -> Any:
    try:
        return validator(value)
    except ValidationError as exc:
        errors.extend({**e, "loc": (*loc, *e["loc"])} for e in exc.errors(include_url=False))
        return None

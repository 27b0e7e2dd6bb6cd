"""The API's JSON answers: a model's JSON text as a 200 response, with its two headers made directly.

Routes answer with this rather than through FastAPI's ``response_model`` pass, which would validate the model a
second time.

Starlette's ``Response(content=..., media_type=...)`` works the same headers out per response (a content type
checked for ``text/``, a charset, a header list grown one by one): a share of the lock operations' CPU worth
saving when it is always the same two headers (docs/performance.md, "Where an uncontended request's time goes").
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel
from starlette.responses import Response

_CONTENT_TYPE = (b"content-type", b"application/json")


class JsonBytes(Response):
    """A response of JSON already encoded; what ``Response(content=body, status_code=status, headers=headers,
    media_type="application/json")`` is, headers in the same order, for a status with a body (not 1xx, 204, 304),
    and ``headers`` other than the two it makes."""

    media_type = "application/json"

    def __init__(self, body: bytes, status: int = 200, headers: Mapping[str, str] | None = None) -> None:
        # Response.__init__ is not called: everything it sets is set here.
        self.status_code = status
        self.body = body
        self.background = None
        length = (b"content-length", str(len(body)).encode("latin-1"))
        if headers:
            self.raw_headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
            self.raw_headers += [length, _CONTENT_TYPE]
        else:
            self.raw_headers = [length, _CONTENT_TYPE]


def json_response(model: BaseModel) -> Response:
    """``model`` as the API shows it (its JSON), answered 200."""
    return JsonBytes(model.model_dump_json().encode())

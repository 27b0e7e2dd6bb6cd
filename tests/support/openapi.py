"""openapi/openapi.json as the tests read it: the document, validators for its schemas, and the check that a real
answer of the service fits what the document declares for its status."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
from jsonschema import Draft202012Validator

OPENAPI = Path(__file__).parents[2] / "openapi" / "openapi.json"
SPEC: dict[str, Any] = json.loads(OPENAPI.read_text())

#: The paths of the lock operations, as the document spells them.
ACQUIRE, RELEASE, EXTEND, GET, LIST = (
    "/v1/locks/{name}/acquire",
    "/v1/locks/{name}/release",
    "/v1/locks/{name}/extend",
    "/v1/locks/{name}",
    "/v1/locks",
)


def validator(schema: dict[str, Any]) -> Draft202012Validator:
    """A validator for a schema of the document, its $refs resolved within the document."""
    return Draft202012Validator({**schema, "components": SPEC["components"]})


def response_schema(path: str, method: str, status: int) -> dict[str, Any]:
    """The JSON schema the document declares for the answer of ``method path`` with ``status``."""
    schema: dict[str, Any] = SPEC["paths"][path][method]["responses"][str(status)]["content"]["application/json"][
        "schema"
    ]
    return schema


def check(response: httpx.Response, path: str, method: str = "get") -> None:
    """The answer validates against what the document declares for its status."""
    errors = [
        e.message for e in validator(response_schema(path, method, response.status_code)).iter_errors(response.json())
    ]
    assert errors == [], f"{method} {path} {response.status_code}: {errors}\n{response.text}"

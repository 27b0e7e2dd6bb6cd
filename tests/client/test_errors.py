"""One exception tree, mapped from the server's error codes by one table; failures are never "held"."""

from __future__ import annotations

import httpx
import pytest

import schedlock
from app.errors import ERROR_CODES
from schedlock import (
    ERROR_CLASSES,
    APIError,
    Forbidden,
    InvalidRequest,
    LockClient,
    LockHeld,
    LockNotFound,
    NotFound,
    NotHolder,
    PayloadTooLarge,
    RequestRejected,
    ServerError,
    ServiceUnavailable,
    ServiceUnreachable,
    StorageUnavailable,
    Unauthorized,
    UnexpectedResponse,
    UnsupportedMediaType,
    error_class,
)
from schedlock._base import decode, error_from_response, get_call

#: Codes the service adds with authentication and body limits; the client knows them already.
AUTH_AND_LIMIT_CODES = {
    "unauthorized": 401,
    "forbidden": 403,
    "payload_too_large": 413,
    "unsupported_media_type": 415,
}


@pytest.mark.parametrize("code", sorted(ERROR_CODES))
def test_every_server_error_code_maps_to_a_client_class_with_its_status(code: str) -> None:
    cls = ERROR_CLASSES[code]
    assert cls.code == code
    assert cls.status == ERROR_CODES[code]
    assert error_class(code, ERROR_CODES[code]) is cls
    assert cls.__name__ in schedlock.__all__


@pytest.mark.parametrize(("code", "status"), sorted(AUTH_AND_LIMIT_CODES.items()))
def test_auth_and_limit_codes_are_mapped(code: str, status: int) -> None:
    cls = ERROR_CLASSES[code]
    assert (cls.code, cls.status) == (code, status)
    assert issubclass(cls, RequestRejected) and not issubclass(cls, ServiceUnavailable)


def test_the_table_has_one_class_per_code_and_nothing_else() -> None:
    assert set(ERROR_CLASSES) == set(ERROR_CODES) | set(AUTH_AND_LIMIT_CODES)
    assert len(set(ERROR_CLASSES.values())) == len(ERROR_CLASSES)


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (400, RequestRejected),
        (404, RequestRejected),
        (409, RequestRejected),
        (429, RequestRejected),
        (500, ServerError),
        (502, ServerError),
        (503, ServerError),
        (504, ServerError),
        (302, APIError),
    ],
)
def test_an_unknown_code_gets_a_base_class_by_status(status: int, expected: type[APIError]) -> None:
    response = httpx.Response(status, json={"error": {"code": "brand_new_code", "message": "new"}})
    error = error_from_response(response, response.json())
    assert type(error) is expected
    assert (error.code, error.status, error.message) == ("brand_new_code", status, "new")
    assert not isinstance(error, LockHeld)


def test_5xx_is_service_unavailable_but_4xx_and_held_are_not() -> None:
    assert issubclass(ServerError, ServiceUnavailable) and issubclass(StorageUnavailable, ServiceUnavailable)
    rejected = (
        LockHeld,
        NotHolder,
        LockNotFound,
        InvalidRequest,
        Unauthorized,
        Forbidden,
        NotFound,
        PayloadTooLarge,
        UnsupportedMediaType,
    )
    for cls in rejected:
        assert not issubclass(cls, ServiceUnavailable), cls
    for unavailable in (ServiceUnreachable, UnexpectedResponse, ServerError):
        assert not issubclass(unavailable, LockHeld), unavailable


def test_a_409_is_lock_held_only_with_the_lock_held_code() -> None:
    not_holder = httpx.Response(409, json={"error": {"code": "not_holder", "message": "gone"}})
    bare = httpx.Response(409, text="<html>conflict</html>")
    assert type(error_from_response(not_holder, not_holder.json())) is NotHolder
    assert type(error_from_response(bare)) is RequestRejected


def test_proxy_pages_and_garbage_are_not_mistaken_for_answers() -> None:
    call = get_call("x")
    with pytest.raises(ServerError) as bad_gateway:
        decode(call, httpx.Response(502, text="<html>Bad Gateway</html>"))
    assert bad_gateway.value.code == "http_502"
    with pytest.raises(UnexpectedResponse):
        decode(call, httpx.Response(200, text="<html>not schedlock</html>"))
    with pytest.raises(UnexpectedResponse):
        decode(call, httpx.Response(200, json={"name": "x", "held": "yes"}))


def test_storage_unavailable_carries_retry_after() -> None:
    response = httpx.Response(
        503, headers={"Retry-After": "1"}, json={"error": {"code": "storage_unavailable", "message": "db down"}}
    )
    error = error_from_response(response, response.json())
    assert isinstance(error, StorageUnavailable) and error.retry_after == 1.0


def test_real_server_errors_decode_to_their_classes(url: str, name: str) -> None:
    with LockClient(url) as client:
        with pytest.raises(InvalidRequest) as invalid:
            client.acquire("x" * 65, "1m")
        assert invalid.value.field == "name" and invalid.value.status == 422
        with pytest.raises(LockNotFound):
            client.get(name)
        with pytest.raises(LockNotFound):
            client.release(name, "no-such-token")
        lease = client.acquire(name, "1m")
        with pytest.raises(NotHolder):
            client.extend(name, "wrong-token", "1m")
        with pytest.raises(LockHeld) as held:
            client.acquire(name, "1m", holder="second")
        assert held.value.locked_by == lease.locked_by
        assert held.value.lock_until == lease.lock_until
        lease.release()


def test_a_url_that_is_not_schedlock_is_not_found_not_held(url: str, name: str) -> None:
    with LockClient(url + "/elsewhere") as client, pytest.raises(NotFound):
        client.acquire(name, "1m")

"""Logs: one structured line per request, the configured level and format, and never a secret."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest
from pydantic import SecretStr, ValidationError

from app.api.edge import new_request_id
from app.ops import logs
from app.ops.logs import (
    HumanFormatter,
    JsonFormatter,
    TurnBufferedHandler,
    configure_logging,
    redact,
    request_id,
    write_json_line,
)
from app.settings import Settings
from tests.support.api import acquire, release
from tests.support.apps import in_process
from tests.support.fork import first_in_forked_child
from tests.support.logs import access, captured, lines
from tests.support.servers import start_server, stop_server

SECRET_PASSWORD = "pw-Zq8vX1-do-not-log"
BEARER = "sl_live_9f2c4b7e1a-do-not-log"


async def test_one_json_line_per_request_with_route_outcome_and_request_id(
    client: httpx.AsyncClient, name: str
) -> None:
    with captured() as out:
        ok = await acquire(client, name, "10m")
        held = await acquire(client, name, "10m")
        await release(client, name, ok.json()["token"])
    first, second, third = access(out)
    assert first == {
        "time": first["time"],
        "level": "info",
        "logger": "schedlock.access",
        "message": "POST /v1/locks/{name}/acquire 200",
        "method": "POST",
        "route": "/v1/locks/{name}/acquire",
        "status": 200,
        "duration_ms": first["duration_ms"],
        "request_id": ok.headers["x-request-id"],
        "lock": name,
        "outcome": "acquired",
        "client": "127.0.0.1",
    }
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", first["time"])
    assert 0 < first["duration_ms"] < 10_000
    assert (second["status"], second["outcome"], second["request_id"]) == (409, "held", held.headers["x-request-id"])
    assert (third["route"], third["outcome"]) == ("/v1/locks/{name}/release", "released")
    assert len({first["request_id"], second["request_id"], third["request_id"]}) == 3


async def test_a_callers_request_id_is_kept_and_a_bad_one_replaced(client: httpx.AsyncClient, name: str) -> None:
    with captured() as out:
        kept = await client.get(f"/v1/locks/{name}", headers={"x-request-id": "cron-42.host-3"})
        replaced = await client.get(f"/v1/locks/{name}", headers={"x-request-id": "no spaces\tor tabs " + "x" * 80})
    assert kept.headers["x-request-id"] == "cron-42.host-3"
    assert re.fullmatch(r"[0-9a-f]{16}", replaced.headers["x-request-id"])
    assert [line["request_id"] for line in access(out)] == ["cron-42.host-3", replaced.headers["x-request-id"]]
    assert [line["status"] for line in access(out)] == [404, 404]


async def test_levels_probes_quiet_failures_loud(client: httpx.AsyncClient) -> None:
    with captured() as out:
        await client.get("/healthz")
        await client.get("/readyz")
        await client.get("/metrics")
        await client.get("/v1/locks", params={"limit": 0})
        await client.get("/nowhere/else")
    levels = [(line["route"], line["level"]) for line in access(out)]
    assert levels == [
        ("/healthz", "debug"),
        ("/readyz", "debug"),
        ("/metrics", "debug"),
        ("/v1/locks", "info"),
        ("unmatched", "info"),
    ]
    assert access(out)[-1]["path"] == "/nowhere/else"


async def test_storage_failures_are_warnings_without_the_password() -> None:
    settings = Settings(
        database_url=SecretStr(f"postgresql://u:{SECRET_PASSWORD}@127.0.0.1:1/nowhere"), db_connect_timeout=1.0
    )
    with captured() as out:
        async with in_process(settings) as (_, client):
            await client.post("/v1/locks/x/acquire", json={"lock_at_most_for": "1m"})
            await client.get("/readyz")
    text = out.getvalue()
    assert SECRET_PASSWORD not in text
    assert [(line["route"], line["status"], line["level"]) for line in access(out)] == [
        ("/v1/locks/{name}/acquire", 503, "warning"),
        ("/readyz", 503, "warning"),
    ]
    assert access(out)[0]["outcome"] == "error"
    assert any(line["logger"] == "schedlock.db" for line in lines(out))  # "database unavailable at start-up"


async def test_human_format_for_a_terminal(client: httpx.AsyncClient, name: str) -> None:
    with captured(HumanFormatter()) as out:
        r = await acquire(client, name, "10m")
    line = out.getvalue().strip()
    assert re.fullmatch(
        rf"\S+Z INFO  schedlock.access: POST /v1/locks/\{{name\}}/acquire 200 method=POST "
        rf"route=/v1/locks/\{{name\}}/acquire status=200 duration_ms=[\d.]+ request_id={r.headers['x-request-id']} "
        rf"lock={name} outcome=acquired client=127.0.0.1",
        line,
    ), line


def test_every_line_written_during_a_request_carries_its_id() -> None:
    logger = logging.getLogger("schedlock.test")
    with captured() as out:
        token = request_id.set("req-7")
        try:
            logger.warning("inside")
        finally:
            request_id.reset(token)
        logger.warning("outside")
    inside, outside = lines(out)
    assert inside["request_id"] == "req-7" and "request_id" not in outside


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("connect to postgresql://app:s3cr3t@db:5432/jobs failed", "s3cr3t"),
        ("postgresql+asyncpg://app:p%40ss@db/jobs", "p%40ss"),
        ("header Authorization: Bearer abc.def-ghi", "abc.def-ghi"),
        ("{'authorization': 'bearer xyz123'}", "xyz123"),
    ],
)
def test_redaction_masks_url_passwords_and_bearer_tokens(text: str, secret: str) -> None:
    masked = redact(text)
    assert secret not in masked and "***" in masked
    logger = logging.getLogger("schedlock.test")
    with captured() as out:
        try:
            raise RuntimeError(text)
        except RuntimeError:
            logger.exception("failed: %s", text)
    assert secret not in out.getvalue() and "RuntimeError" in out.getvalue()


def test_redaction_leaves_ordinary_text_alone() -> None:
    for text in ("user@example.com acquired nightly", "POST /v1/locks/{name}/acquire 200", "http://host/x@y"):
        assert redact(text) == text


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    switches = (logging.logThreads, logging.logProcesses, logging.logMultiprocessing)
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)
    logging.logThreads, logging.logProcesses, logging.logMultiprocessing = switches
    logging.getLogger("uvicorn.access").disabled = False


class CountingStream(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


def buffered_logger(stream: io.StringIO) -> tuple[logging.Logger, TurnBufferedHandler]:
    handler = TurnBufferedHandler(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger = logging.Logger("schedlock.test.buffered")  # not registered: nothing else sees it
    logger.addHandler(handler)
    return logger, handler


async def test_lines_of_one_event_loop_turn_are_written_together_at_its_end() -> None:
    stream = CountingStream()
    logger, _ = buffered_logger(stream)
    for i in range(3):
        logger.warning("line %d", i)
    assert stream.getvalue() == "", "written before the end of the turn"
    await asyncio.sleep(0)
    assert stream.getvalue() == "line 0\nline 1\nline 2\n"
    assert stream.writes == 1
    logger.warning("next turn")
    await asyncio.sleep(0)
    assert stream.getvalue().endswith("line 2\nnext turn\n")


async def test_a_line_logged_off_the_loop_keeps_the_order_and_flush_writes_what_is_held() -> None:
    stream = CountingStream()
    logger, handler = buffered_logger(stream)
    logger.warning("on the loop")
    await asyncio.to_thread(logger.warning, "from a thread")  # no loop there: written at once, after held lines
    assert stream.getvalue() == "on the loop\nfrom a thread\n"
    logger.warning("held")
    handler.flush()  # what logging.shutdown() does at exit
    assert stream.getvalue().endswith("from a thread\nheld\n")


def test_off_the_loop_each_line_is_written_at_once() -> None:
    stream = CountingStream()
    logger, _ = buffered_logger(stream)
    logger.warning("start-up")
    assert stream.getvalue() == "start-up\n"


@pytest.mark.usefixtures("restore_logging")
def test_configured_level_and_format() -> None:
    stream = io.StringIO()
    configure_logging("WARNING", "json", stream)
    logging.getLogger("schedlock.test").info("hidden")
    logging.getLogger("schedlock.test").warning("shown")
    assert [line["message"] for line in lines(stream)] == ["shown"]

    stream = io.StringIO()
    configure_logging("DEBUG", "auto", stream)  # not a terminal: JSON
    logging.getLogger("schedlock.test").debug("detail")
    assert lines(stream)[0]["level"] == "debug"


@pytest.mark.usefixtures("restore_logging")
def test_an_access_line_written_directly_is_the_line_its_record_would_give() -> None:
    stream = io.StringIO()
    configure_logging("INFO", "json", stream)
    logger = logging.getLogger("schedlock.access")
    fields = {"method": "POST", "status": 409, "lock": "billing/\u2028nightly", "request_id": "r-1", "n": 1.5}
    assert write_json_line(logger, logging.INFO, "POST /v1/locks/{name}/acquire 409", fields)
    logger.log(logging.INFO, "%s %s %d", "POST", "/v1/locks/{name}/acquire", 409, extra={"fields": fields})
    direct, record = stream.getvalue().splitlines()
    assert "\\u2028" in direct and "\u2028" not in direct  # still one line
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", json.loads(direct)["time"])
    assert {**json.loads(direct), "time": ""} == {**json.loads(record), "time": ""}
    assert list(json.loads(direct)) == list(json.loads(record))  # the same keys, in the same order


@pytest.mark.usefixtures("restore_logging")
def test_an_access_line_goes_through_logging_unless_the_configuration_is_the_json_one() -> None:
    logger = logging.getLogger("schedlock.access")
    fields = {"request_id": "r-2"}
    stream = io.StringIO()
    configure_logging("INFO", "human", stream)
    assert not write_json_line(logger, logging.INFO, "GET /healthz 200", fields)
    configure_logging("INFO", "json", stream)
    with captured():  # a second handler (as pytest's caplog adds one): it must see the record
        assert not write_json_line(logger, logging.INFO, "GET /healthz 200", fields)
    only_some = logging.Filter("schedlock.other")
    logger.addFilter(only_some)
    try:
        assert not write_json_line(logger, logging.INFO, "GET /healthz 200", fields)
    finally:
        logger.removeFilter(only_some)
    assert stream.getvalue() == ""
    assert write_json_line(logger, logging.INFO, "GET /healthz 200", fields)
    assert json.loads(stream.getvalue())["request_id"] == "r-2"


def test_log_settings_are_validated() -> None:
    assert Settings.model_validate({"log_level": "debug", "log_format": "human"}).log_level == "DEBUG"
    with pytest.raises(ValidationError):
        Settings.model_validate({"log_level": "verbose"})
    with pytest.raises(ValidationError):
        Settings.model_validate({"log_format": "xml"})


def _with_password(url: str) -> tuple[str, str]:
    """The URL with a password the trust-authenticated test database ignores, and the password to look for."""
    parts = urlsplit(url)
    if parts.password or not parts.username or not parts.hostname:
        return url, parts.password or SECRET_PASSWORD
    netloc = f"{parts.username}:{SECRET_PASSWORD}@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc)), SECRET_PASSWORD


def test_the_real_server_writes_json_lines_without_secrets(settings: Settings, name: str) -> None:
    url, password = _with_password(settings.asyncpg_dsn())
    server = start_server(
        settings.model_copy(update={"database_url": SecretStr(url)}),
        extra_env={"SCHEDLOCK_LOG_FORMAT": "json", "SCHEDLOCK_LOG_LEVEL": "debug"},
    )
    try:
        with httpx.Client(base_url=server.url, headers={"authorization": f"Bearer {BEARER}"}) as client:
            lease = client.post(f"/v1/locks/{name}/acquire", json={"lock_at_most_for": "1m"})
            client.post(f"/v1/locks/{name}/extend", json={"token": lease.json()["token"], "lock_at_most_for": "2m"})
            client.post(f"/v1/locks/{name}/release", json={"token": lease.json()["token"]})
            client.post(f"/v1/locks/{name}/release", json={"token": "wrong"})
            client.get("/metrics")
            ids = [lease.headers["x-request-id"]]
    finally:
        output = stop_server(server)
    records = [json.loads(line) for line in output.splitlines() if line.strip()]  # every line is JSON
    assert password not in output and lease.json()["token"] not in output and BEARER not in output
    requests = [r for r in records if r["logger"] == "schedlock.access" and r.get("lock") == name]
    assert [(r["route"].rsplit("/", 1)[-1], r["outcome"]) for r in requests] == [
        ("acquire", "acquired"),
        ("extend", "extended"),
        ("release", "released"),
        ("release", "not_holder"),
    ]
    assert requests[0]["request_id"] == ids[0]
    assert not any("HTTP/1.1" in r["message"] for r in records)  # uvicorn's own access log is off
    assert any(r["logger"].startswith("uvicorn") for r in records)  # its start-up lines come through as JSON


def test_new_request_ids_are_random_and_a_forked_child_does_not_repeat_them() -> None:
    ids = [new_request_id() for _ in range(1100)]  # more than one batch of random bytes
    assert len(set(ids)) == len(ids) and all(re.fullmatch(r"[0-9a-f]{16}", i) for i in ids)
    child_id = first_in_forked_child(new_request_id)  # must not be the one its parent is about to hand out
    assert re.fullmatch(r"[0-9a-f]{16}", child_id) and child_id != new_request_id()


@pytest.mark.parametrize("formatter", [JsonFormatter(), HumanFormatter()], ids=["json", "human"])
async def test_a_name_with_a_line_separator_stays_on_one_log_line(
    client: httpx.AsyncClient, formatter: logging.Formatter
) -> None:
    """JSON leaves U+2028, U+2029 and U+0085 raw inside strings; a reader splitting lines the Unicode way would cut
    the record there. A lock name may hold U+2028, a path anything."""
    name = f"job\u2028{os.urandom(4).hex()}\u2029"
    with captured(formatter) as out:
        await acquire(client, name, "1m")
        await client.get("/nowhere/\u0085")
    records = out.getvalue().splitlines()
    assert len(records) == 2, records
    if isinstance(formatter, JsonFormatter):
        assert json.loads(records[0]).get("lock") == name


def test_a_direct_line_is_stamped_with_the_time_it_is_written() -> None:
    """write_json_line's stamp is made once per millisecond (lines at load share it): it must still be the time
    the line is written, to the millisecond, and move on with the clock."""
    seen = set()
    for _ in range(5):
        before = time.time()
        stamp = logs.stamp_now()
        after = time.time()
        at = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()
        assert int(before * 1000) / 1000 - 1e-6 <= at <= after + 1e-6, (before, stamp, after)
        seen.add(stamp)
        time.sleep(0.003)
    assert len(seen) == 5

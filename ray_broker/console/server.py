"""The console's HTTP server (aiohttp): the page in `static/` and its JSON API under `/api/`.

Every API call runs its namespace operation on a worker thread (the client blocks); a failure
answers `{"error": "<the line the CLI prints>"}` with a 4xx or 5xx status. When the console asks
for a token, every API call must present one (`auth`); the page itself holds no data and is served
to anyone who reaches the port.
"""
from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib.resources import files
from typing import Any, Awaitable, Callable

from aiohttp import web

from ..cli.failures import error_line
from ..cli.properties import parse_property
from ..errors import (InvalidArgumentError, InvalidOperationError, MessageNotFoundError, MessagingEntityNotFoundError,
                      UnauthorizedError, unwrap_remote_error)
from . import auth
from .operations import ConsoleOperations

WORKERS = 4
"""Namespace operations under way at once (a long purge leaves the others to the page's refreshes)."""
STATUSES = ((UnauthorizedError, 401), (MessagingEntityNotFoundError, 404), (MessageNotFoundError, 404),
            (InvalidArgumentError, 400), (InvalidOperationError, 409))
"""The HTTP status of a failure of each type (and its subtypes); others answer 500."""
STATIC = files(__package__) / "static"
PAGES = {"/": "index.html", "/console.css": "console.css", "/console.js": "console.js"}
CONTENT_TYPES = {".html": "text/html", ".css": "text/css", ".js": "text/javascript"}
SEND_FIELDS = ("subject", "content_type", "message_id", "correlation_id", "session_id", "partition_key")


@dataclass(frozen=True)
class ConsoleSettings:
    """Where the console listens and whether it asks for a token."""

    host: str
    port: int
    require_token: bool


def make_app(operations: ConsoleOperations, require_token: bool) -> web.Application:
    """The console's application over `operations`; with `require_token`, API calls need a token."""
    pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="ray-broker-console")
    auth_hash = operations.ns.config.auth_token_hash

    async def blocking(call: Callable[[], Any]) -> Any:
        return await asyncio.get_running_loop().run_in_executor(pool, call)

    @web.middleware
    async def guard(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                    ) -> web.StreamResponse:
        if not request.path.startswith("/api/"):
            return await handler(request)
        try:
            if require_token:
                secret = auth.presented_secret({k.lower(): v for k, v in request.headers.items()})
                keys = await blocking(operations.keys)
                auth.check_secret(secret, keys, auth_hash, time.time())
            return await handler(request)
        except web.HTTPException:
            raise
        except Exception as exc:  # noqa: BLE001 - every failure answers as the CLI's one line
            return web.json_response({"error": error_line(exc)}, status=http_status(exc))

    async def overview(request: web.Request) -> web.Response:
        return web.json_response(await blocking(operations.overview))

    async def entity(request: web.Request) -> web.Response:
        kind, path = _named(request.query)
        return web.json_response(await blocking(lambda: operations.entity(kind, path)))

    async def messages(request: web.Request) -> web.Response:
        kind, path = _named(request.query)
        dead = request.query.get("dead_letter") in ("1", "true")
        start, count = _int(request.query, "from", 0), _int(request.query, "count", 20)
        partition = _int(request.query, "partition", -1)
        where = request.query.get("filter") or None
        return web.json_response(await blocking(
            lambda: operations.peek(kind, path, dead_letter=dead, from_sequence=start, count=count, filter=where,
                                    partition=None if partition < 0 else partition)))

    async def purge(request: web.Request) -> web.Response:
        body = await _json(request)
        kind, path = _named(body)
        return web.json_response(await blocking(
            lambda: operations.purge(kind, path, dead_letter=bool(body.get("dead_letter")))))

    async def resubmit(request: web.Request) -> web.Response:
        body = await _json(request)
        kind, path = _named(body)
        numbers = body.get("sequence_numbers") or None
        if numbers is not None and not (isinstance(numbers, list) and all(
                isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in numbers)):
            raise InvalidArgumentError(f"sequence_numbers must be a list of sequence numbers, got {numbers!r}")
        to = body.get("to") or None
        where = body.get("filter") or None
        if not isinstance(to, (str, type(None))) or not isinstance(where, (str, type(None))):
            raise InvalidArgumentError("'to' and 'filter' must be texts")
        return web.json_response(await blocking(
            lambda: operations.resubmit(kind, path, sequence_numbers=numbers, to=to, filter=where)))

    async def send(request: web.Request) -> web.Response:
        body = await _json(request)
        path = _text(body, "path")
        fields: dict[str, Any] = {k: body[k] for k in SEND_FIELDS if body.get(k)}
        properties = body.get("properties") or []
        if not isinstance(properties, list):
            raise InvalidArgumentError("properties must be a list of KEY=VALUE or KEY:TYPE=VALUE texts")
        fields["application_properties"] = _properties(properties)
        count = body.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int):
            raise InvalidArgumentError(f"count must be a whole number, got {count!r}")
        text = body.get("body", "")
        if not isinstance(text, str):
            raise InvalidArgumentError("body must be text")
        return web.json_response(await blocking(lambda: operations.send(path, body=text, count=count, fields=fields)))

    async def page(request: web.Request) -> web.Response:
        name = PAGES[request.path]
        return web.Response(body=(STATIC / name).read_bytes(),
                            content_type=CONTENT_TYPES[name[name.rindex("."):]], charset="utf-8",
                            headers={"Cache-Control": "no-cache"})

    async def closed(app: web.Application) -> None:
        pool.shutdown(wait=False, cancel_futures=True)

    app = web.Application(middlewares=[guard])
    app.router.add_get("/api/overview", overview)
    app.router.add_get("/api/entity", entity)
    app.router.add_get("/api/messages", messages)
    app.router.add_post("/api/purge", purge)
    app.router.add_post("/api/resubmit", resubmit)
    app.router.add_post("/api/send", send)
    for path in PAGES:
        app.router.add_get(path, page)
    app.on_cleanup.append(closed)
    return app


async def serve(operations: ConsoleOperations, settings: ConsoleSettings, ready: Callable[[str], None],
                stop: asyncio.Event) -> None:
    """Serve the console until `stop` is set; `ready` is told its address once it listens."""
    runner = web.AppRunner(make_app(operations, settings.require_token), access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, settings.host, settings.port)
        await site.start()
        port = runner.addresses[0][1] if runner.addresses else settings.port  # the one chosen for port 0
        host = f"[{settings.host}]" if ":" in settings.host else settings.host
        ready(f"http://{host}:{port}/")
        await stop.wait()
    finally:
        await runner.cleanup()


def http_status(exc: BaseException) -> int:
    """The HTTP status a failure answers with (see `STATUSES`)."""
    cause = unwrap_remote_error(exc)
    return next((status for kind, status in STATUSES if isinstance(cause, kind)), 500)


def _named(values: Any) -> tuple[str, str]:
    """The entity a request names: its kind and path."""
    return _text(values, "kind"), _text(values, "path")


def _text(values: Any, name: str) -> str:
    value = values.get(name)
    if not isinstance(value, str) or not value:
        raise InvalidArgumentError(f"the request needs {name!r}, a non-empty text")
    return value


def _int(values: Any, name: str, default: int) -> int:
    text = values.get(name)
    if text in (None, ""):
        return default
    try:
        return int(text)
    except ValueError:
        raise InvalidArgumentError(f"{name!r} must be a whole number, got {text!r}") from None


async def _json(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError:
        raise InvalidArgumentError("the request's body must be a JSON object") from None
    if not isinstance(body, dict):
        raise InvalidArgumentError("the request's body must be a JSON object")
    return body


def _properties(texts: list[Any]) -> dict[str, Any]:
    """Application properties from `KEY=VALUE` / `KEY:TYPE=VALUE` texts, typed as `send --property` types them."""
    out: dict[str, Any] = {}
    for text in texts:
        if not isinstance(text, str):
            raise InvalidArgumentError(f"a property must be KEY=VALUE or KEY:TYPE=VALUE text, got {text!r}")
        try:
            key, value = parse_property(text)
        except Exception as exc:  # typer.BadParameter: the CLI's usage error, worded for --property
            raise InvalidArgumentError(exc.format_message() if hasattr(exc, "format_message") else str(exc)) from None
        out[key] = value
    return out

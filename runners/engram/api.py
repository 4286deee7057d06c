"""The HTTP surface (FastAPI): OpenAI routes, /tokenize, /health, /stats, /metrics, and
POST /table/drop_cache (nvme: back to a cold page cache).

Thin: parsing and errors here, generation in serving.py, counters in runtime.py.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from runners.engram.protocol import (
    APIError,
    ChatRequest,
    CompletionRequest,
    TokenizeRequest,
    json_object,
    reject_unsupported,
)
from runners.engram.runtime import Runtime
from runners.engram.serving import Serving, off_loop_if_long, prompt_chars
from runners.engram.stats import ServerStats
from runners.engram.table_store import TableCacheError

MAX_BODY = 1024 * 1024
BODY_TIMEOUT_S = 30.0  # for the whole body, from the end of its head
# a refused body is left unread: the connection closes after the answer instead
_CLOSE = {"Connection": "close"}
M = TypeVar("M", bound=BaseModel)


def _error(exc: APIError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)


async def _body(request: Request, timeout_s: float) -> bytes:
    """The body, refused as soon as it passes MAX_BODY (a chunked one declares no length, so
    it is counted as it arrives) or when it is not all in within `timeout_s` (a client that
    trickles bytes would otherwise hold its slot for good)."""
    too_large = APIError(400, f"the request body exceeds {MAX_BODY} bytes", headers=_CLOSE)
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY:
        raise too_large
    body = bytearray()
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.stream():
                body += chunk
                if len(body) > MAX_BODY:
                    raise too_large
    except TimeoutError:
        raise APIError(408, f"the request body did not arrive within {timeout_s:g} s",
                       code="request_timeout", headers=_CLOSE) from None
    return bytes(body)


def _validate(model: type[M], data: dict) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        # our own validators' sentences, without pydantic's "Value error, " in front
        message = str(first["ctx"]["error"]) if first["type"] == "value_error" else first["msg"]
        raise APIError(400, f"{where}: {message}", param=where) from None


def create_app(runtime: Runtime, api_key: str | None = None,
               body_timeout_s: float = BODY_TIMEOUT_S) -> FastAPI:
    app = FastAPI(title="engram-bench Engram server", docs_url=None, redoc_url=None)
    _add_error_handlers(app)
    _add_key_check(app, api_key)
    _add_openai_routes(app, runtime.serving, body_timeout_s)
    _add_server_routes(app, runtime)
    return app


def _add_error_handlers(app: FastAPI) -> None:
    """Every error as an OpenAI error object, a client gone before its body as nothing."""

    @app.exception_handler(APIError)
    async def api_error(_: Request, exc: APIError) -> JSONResponse:
        return _error(exc)

    @app.exception_handler(ClientDisconnect)
    async def client_left(request: Request, exc: ClientDisconnect) -> Response:
        """The client closed before its request body arrived: nobody to answer, nothing to log
        (nginx's 499, for the access log)."""
        return Response(status_code=499)

    @app.exception_handler(HTTPException)
    async def routing_error(request: Request, exc: HTTPException) -> JSONResponse:
        """Unknown path (404), wrong method (405): OpenAI error objects too, not {"detail"}."""
        return _error(APIError(exc.status_code,
                               f"{exc.detail} ({request.method} {request.url.path})",
                               code=None, headers=exc.headers))


def _add_key_check(app: FastAPI, api_key: str | None) -> None:
    """With a key, every path but /health needs it as a bearer token."""

    @app.middleware("http")
    async def check_key(request: Request,
                        call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        if api_key and request.url.path != "/health":
            scheme, _, token = request.headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not secrets.compare_digest(token.strip(), api_key):
                return _error(APIError(401, "missing or wrong API key", code="invalid_api_key"))
        return await call_next(request)


def _add_openai_routes(app: FastAPI, serving: Serving, body_timeout_s: float) -> None:
    """/v1/chat/completions, /v1/completions, /v1/models and /tokenize."""

    async def json_body(request: Request) -> dict:
        return json_object(await _body(request, body_timeout_s))

    async def generate(request: Request,
                       model: type[ChatRequest] | type[CompletionRequest]) -> Response:
        data = await json_body(request)
        reject_unsupported(data)
        req = _validate(model, data)
        x_request_id = request.headers.get("x-request-id")
        received = time.monotonic()
        call = serving.start(req, received, x_request_id, await serving.tokenized(req))
        echo = {"X-Request-Id": x_request_id} if x_request_id else {}
        if req.stream:
            return StreamingResponse(serving.stream(call), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache", **echo})
        return JSONResponse(await serving.complete(call), headers=echo)

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        return await generate(request, ChatRequest)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await generate(request, CompletionRequest)

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [{
            "id": serving.model_name, "object": "model", "owned_by": "engram-bench",
            "max_model_len": serving.max_seq}]}

    @app.post("/tokenize")
    async def tokenize(request: Request) -> dict:
        req = _validate(TokenizeRequest, await json_body(request))
        if req.messages:
            messages = [m.model_dump() for m in req.messages]
            ids = await off_loop_if_long(prompt_chars(req),
                                         lambda: serving.tokenizer.chat_prompt(messages))
        elif req.prompt is not None:
            prompt = req.prompt
            ids = await off_loop_if_long(len(prompt), lambda: serving.tokenizer.encode(prompt))
        else:
            raise APIError(400, "give prompt or messages", param="prompt")
        return {"tokens": ids, "count": len(ids), "max_model_len": serving.max_seq}


def _add_server_routes(app: FastAPI, runtime: Runtime) -> None:
    """/health, /stats, /metrics and POST /table/drop_cache: the server itself."""

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok"}

    @app.get("/stats", response_model=None)  # the figures as measured: no validation pass
    async def stats() -> ServerStats:
        return await asyncio.to_thread(runtime.stats)  # mincore and smaps: off the loop

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(await asyncio.to_thread(runtime.prometheus),
                        media_type=CONTENT_TYPE_LATEST)

    @app.post("/table/drop_cache")
    async def drop_cache() -> dict:
        """nvme: back to a cold start (benchmarks call it between rounds)."""
        try:
            await asyncio.to_thread(runtime.drop_table_cache)
        except TableCacheError as exc:
            raise APIError(409, str(exc), code="no_table_cache") from None
        return {"status": "dropped", **runtime.store.residency()}

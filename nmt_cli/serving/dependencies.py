"""The FastAPI dependencies of `nmt serve`'s routes: what runs before a route's own code.

`shared_service` hands a route the app's `Service`. `require_key` refuses a request to /info or
/metrics without a valid API key. POST /translate's key may travel in its body, so its body is
read first (`read_posted`: within the size limit, and only as far as telling JSON from a form and
nmt's request shape from LibreTranslate's); `keyed_posted` then checks the key, before any field
is checked, so that a client without a key learns nothing of what else is wrong with its request.
A refusal is raised as `refusals.Refused`, which the app answers as
`{"error": "..."}` with their status.

Every dependency is async, even where it awaits nothing: FastAPI runs a plain function in a
thread, and that hop would delay reading the body, which is lost when its client hangs up first
(uvicorn answers a read after a disconnect with the disconnect, not the body)."""

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request
from starlette.requests import ClientDisconnect

from nmt_cli.serving import libretranslate
from nmt_cli.serving.requests import Refused, json_object
from nmt_cli.serving.service import Service

NMT_KEY_REFUSED = "api_key: missing or not valid; send api_key or Authorization: Bearer KEY"
LIBRETRANSLATE_KEY_REFUSED = "Invalid API key"  # what LibreTranslate answers, and its clients expect


async def shared_service(request: Request) -> Service:
    service: Service = request.app.state.service
    return service


ServiceDep = Annotated[Service, Depends(shared_service)]


def check_key(service: Service, request: Request, given: Any = None, message: str = NMT_KEY_REFUSED) -> None:
    """A 403 when keys are required and the request has no valid one: `given` (a body's
    api_key field), else a Bearer token, else the api_key query parameter."""
    if service.keys is None:
        return
    key = given if isinstance(given, str) and given else None
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if key is None and scheme.lower() == "bearer":
        key = token.strip()
    if key is None:
        key = request.query_params.get("api_key")
    if not service.keys.allows(key):
        raise Refused(403, message)


async def require_key(request: Request, service: ServiceDep) -> None:
    """The key check of the routes that take no body (/info, /metrics)."""
    check_key(service, request)


@dataclass(frozen=True)
class Posted:
    """A POST /translate as read, before any field is checked."""

    fields: dict[str, Any]
    """The JSON object of nmt's shape; for LibreTranslate's, its query fields and body fields."""
    libretranslate: bool
    """In LibreTranslate's shape (q, source, target...) rather than nmt's ({"text": [...]})."""


async def read_posted(request: Request, service: ServiceDep) -> Posted:
    """The body (413 past the size limit) and its fields: multipart, urlencoded or query-string
    fields are LibreTranslate's; a JSON object is LibreTranslate's when it has its fields."""
    body = await read_body(request, service.limits.max_body_bytes)
    content_type = request.headers.get("content-type", "")
    query = libretranslate.query_fields(request.query_params.multi_items())
    kind = content_type.split(";")[0].strip().lower()
    if kind == "multipart/form-data":  # LibreTranslate takes its fields as multipart too
        fields = await libretranslate.multipart_fields(request.scope, body)
        return Posted({**query, **fields}, libretranslate=True)
    form = kind == "application/x-www-form-urlencoded"
    # `curl -d '{...}'` labels a JSON body as a form: a body that is a JSON object is JSON.
    form = form and not body.lstrip().startswith(b"{")
    if form or (query and not body.strip()):  # LibreTranslate's other request shapes
        return Posted(libretranslate.fields(body, content_type, query), libretranslate=True)
    data = json_object(body)
    if libretranslate.is_libretranslate(data):
        return Posted({**query, **data}, libretranslate=True)
    return Posted(data, libretranslate=False)


async def keyed_posted(
    request: Request, service: ServiceDep, posted: Annotated[Posted, Depends(read_posted)]
) -> Posted:
    """The request once its key is checked, with the refusal of its API's shape."""
    message = LIBRETRANSLATE_KEY_REFUSED if posted.libretranslate else NMT_KEY_REFUSED
    check_key(service, request, posted.fields.get("api_key"), message)
    return posted


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused with 413 past `limit` bytes without reading the rest (bounded memory)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise Refused(413, f"body: {declared} bytes; at most {limit}")
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise Refused(413, f"body: more than {limit} bytes")
            chunks.append(chunk)
    except ClientDisconnect:  # gone before its body arrived: nothing to queue, no one to answer
        raise Refused(400, "body: the client went away before sending it") from None
    return b"".join(chunks)

"""The sandbox server's check of a request's shape, before Gradio reads it.

The page's handlers check every value they are given (``splits.sandbox.app``), but Gradio reads a
request first: a request naming an event that does not exist ends in a server traceback and an
HTTP 500; one with fewer values than the event takes ends in a traceback that prints the values
whole; a body that is no list of values is answered with the body quoted back. This ASGI
middleware reads the body of each request that runs an event (``/queue/join``, ``/call/<name>``)
up to ``MAX_REQUEST_BYTES``, and answers one that is too large, is not JSON, names no event of the
page or brings too few values with one short line (HTTP 413 or 422) that quotes nothing sent;
any other request goes on unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

#: the largest body of a request that runs an event: the page's values (a lexicon of at most
#: hypotheses.max_entries x max_phrase_tokens x 40 characters, and names of the run) are far
#: smaller
MAX_REQUEST_BYTES = 2 << 20


class RequestGuard:
    """ASGI middleware: ``inputs_by_event`` is the number of values each event takes, by its
    index; ``inputs_by_api`` the same by its API name; ``selects`` the indexes of the events whose
    handler reads the event data as an object (a table's select: Gradio's SelectData)."""

    def __init__(
        self,
        app,
        inputs_by_event: Mapping[int, int],
        inputs_by_api: Mapping[str, int],
        selects: frozenset[int] = frozenset(),
    ):
        self.app = app
        self.inputs_by_event = dict(inputs_by_event)
        self.inputs_by_api = dict(inputs_by_api)
        self.selects = frozenset(selects)

    async def __call__(self, scope, receive, send):
        path = scope.get("path", "") if scope.get("type") == "http" else ""
        api = path.rsplit("/call/", 1)[1].strip("/") if "/call/" in path else None
        runs_event = path.endswith("/queue/join") or (api is not None and "/" not in api)
        if scope.get("method") != "POST" or not runs_event:
            await self.app(scope, receive, send)
            return
        body = b""
        while True:
            message = await receive()
            if message.get("type") == "http.disconnect":
                return
            body += message.get("body", b"")
            if len(body) > MAX_REQUEST_BYTES:
                await _refuse(send, 413, f"the request is over {MAX_REQUEST_BYTES:,} bytes")
                return
            if not message.get("more_body"):
                break
        problem = self.problem(body, api)
        if problem:
            await _refuse(send, 422, problem)
            return
        delivered = False

        async def replay():
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    def problem(self, body: bytes, api: str | None) -> str | None:
        """What is wrong with a request's body (None: nothing this check sees)."""
        try:
            request = json.loads(body)
        except (ValueError, RecursionError):
            return "the request is not JSON"
        if not isinstance(request, dict):
            return "the request is not a JSON object"
        if api is None:
            event = request.get("fn_index")
            if type(event) is not int or event not in self.inputs_by_event:
                return "the request names no event of this page"
            wanted = self.inputs_by_event[event]
            # a change event's data is the control's new value (a checkbox sends true); only a
            # select's handler reads it as an object (SelectData), and fails on anything else
            event_data = request.get("event_data")
            if event in self.selects and not isinstance(event_data, dict | None):
                return "the request's event data is not a JSON object"
        else:
            if api not in self.inputs_by_api:
                return "the request names no event of this page"
            wanted = self.inputs_by_api[api]
        data = request.get("data")
        if not isinstance(data, list):
            return "the request's data is not a list of values"
        if len(data) < wanted:
            return f"the request brings {len(data)} values; this event takes {wanted}"
        return None


async def _refuse(send, status: int, line: str) -> None:
    body = json.dumps({"detail": line}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def request_guard(blocks):
    """The guard as Starlette middleware for ``blocks`` (its events' indexes, API names and
    numbers of inputs), to give Gradio's ``launch(app_kwargs={"middleware": [...]})``."""
    from starlette.middleware import Middleware

    by_event = {index: len(fn.inputs) for index, fn in blocks.fns.items()}
    by_api = {
        fn.api_name: len(fn.inputs)
        for fn in blocks.fns.values()
        if isinstance(fn.api_name, str) and fn.api_name
    }
    selects = frozenset(
        index
        for index, fn in blocks.fns.items()
        if any(event == "select" for _, event in fn.targets)
    )
    return Middleware(RequestGuard, inputs_by_event=by_event, inputs_by_api=by_api, selects=selects)

"""The JSON API: the same client calls as the pages (and the CLI), as JSON."""

from __future__ import annotations

import json

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response

from mlms.errors import InvalidArgument
from mlms.evaluation.query_terms import MAX_PAGE_SIZE
from mlms.ui.connections import COOKIE
from mlms.ui.deps import connection, connections
from mlms.ui.forms import as_text, evaluation_request
from mlms.ui.pages import SHOWN
from mlms.ui.routes import compared, set_session
from mlms.ui.search import Filters

router = APIRouter(prefix="/api")


@router.get("/fleet")
def fleet(request: Request) -> dict[str, object]:
    conn = connection(request)
    return {
        "embedded": conn.embedded,
        "machines": [m.__dict__ for m in conn.machines()],
        "in_flight": [j.model_dump(mode="json") for j in conn.in_flight()],
        "runs": [r.as_json() for r in conn.runs.active()],
    }


@router.get("/models")
def models(request: Request) -> list[dict[str, object]]:
    return [m.model_dump(mode="json") for m in connection(request).client.list_models()]


@router.get("/evaluations")
def evaluations(request: Request) -> dict[str, object]:
    query = dict(request.query_params)
    limit = _limit(query.pop("limit", str(SHOWN)))
    listing = connection(request).client.list_evaluations(Filters.parse(query).query(limit))
    return {
        "matched": listing.total,
        "evaluations": [s.model_dump(mode="json") for s in listing.summaries],
        "next_page_token": listing.next_page_token,
        "in_flight": [j.model_dump(mode="json") for j in listing.in_flight],
    }


def _limit(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= MAX_PAGE_SIZE:
        raise InvalidArgument(
            f"bad limit {text!r}: expected a whole number from 1 to {MAX_PAGE_SIZE}"
        )
    return int(text)


@router.post("/evaluations", status_code=202)
async def start(request: Request) -> dict[str, object]:
    body = await _json_object(request)

    def started() -> dict[str, object]:
        conn = connection(request)
        run = conn.runs.start(evaluation_request(as_text(body), conn.client.list_models()))
        return {"run": run.as_json(), "url": f"/api/runs/{run.id}"}

    return await run_in_threadpool(started)


@router.get("/runs/{run_id}")
def run(request: Request, run_id: str) -> dict[str, object]:
    return connection(request).runs.get(run_id).as_json()


@router.get("/evaluations/{evaluation_id}")
def evaluation(request: Request, evaluation_id: str) -> Response:
    record = connection(request).client.get_evaluation(evaluation_id)
    return Response(record.model_dump_json(), media_type="application/json")


@router.get("/evaluations/{evaluation_id}/trace.json")
def chrome_trace(request: Request, evaluation_id: str) -> JSONResponse:
    from mlms.ui.reports import chrome_trace as trace_of

    conn = connection(request)
    record = conn.client.get_evaluation(evaluation_id)
    return JSONResponse(
        trace_of(conn.client, record),
        headers={"Content-Disposition": f'attachment; filename="trace-{record.id[:12]}.json"'},
    )


@router.get("/compare")
def compare(request: Request) -> dict[str, object]:
    records = compared(connection(request), request.query_params.getlist("id"))
    return {"evaluations": [json.loads(r.model_dump_json()) for r in records]}


@router.post("/session")
async def login(request: Request) -> Response:
    body = await _json_object(request)
    token = body.get("token")
    if not isinstance(token, str):
        raise InvalidArgument('expected a JSON object with the token as text: {"token": ...}')
    session = await run_in_threadpool(connections(request).login, token)
    response = JSONResponse({"signed_in": True})
    set_session(request, response, session)
    return response


@router.delete("/session")
def logout(request: Request) -> JSONResponse:
    connections(request).logout(request.cookies.get(COOKIE))
    response = JSONResponse({"signed_in": False})
    response.delete_cookie(COOKIE, path="/")
    return response


async def _json_object(request: Request) -> dict[str, object]:
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        raise InvalidArgument("expected a JSON body (Content-Type: application/json)")
    try:
        body = json.loads(await request.body())
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidArgument(f"the body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise InvalidArgument(f"expected a JSON object, got {type(body).__name__}")
    return body

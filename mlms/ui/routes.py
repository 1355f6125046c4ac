"""The pages. Each asks the visitor's client, then renders with ``mlms.ui.pages``."""

from __future__ import annotations

from urllib.parse import parse_qsl

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from mlms.advise.record import AdviceRecord
from mlms.errors import InvalidArgument, MlmsError, NotFound, PermissionDenied, Unauthenticated
from mlms.evaluation.record import EvaluationRecord
from mlms.ui import pages
from mlms.ui.connections import COOKIE, Connection, LoginRequired
from mlms.ui.deps import config, connection, connections, signed_in
from mlms.ui.forms import evaluation_request
from mlms.ui.html import frame
from mlms.ui.search import Filters

router = APIRouter()

#: Evaluations one comparison takes at most (each adds its levels to the report).
MAX_COMPARED = 8


def page(request: Request, title: str, body: str, *, active: str = "", status: int = 200):
    html = frame(title, body, active=active, signed_in=signed_in(request))
    return HTMLResponse(html, status_code=status)


def fragment(body: str) -> HTMLResponse:
    return HTMLResponse(body)


@router.get("/", include_in_schema=False)
def home() -> RedirectResponse:
    return RedirectResponse("/evaluations", status_code=303)


@router.get("/fleet")
def fleet(request: Request) -> HTMLResponse:
    conn = connection(request)
    live = pages.fleet_live(conn.machines(), conn.in_flight(), conn.runs.active())
    return page(request, "Fleet", pages.fleet(conn.embedded, live), active="/fleet")


@router.get("/fleet/live")
def fleet_live(request: Request) -> HTMLResponse:
    conn = connection(request)
    return fragment(pages.fleet_live(conn.machines(), conn.in_flight(), conn.runs.active()))


@router.get("/zoo")
def zoo(request: Request) -> HTMLResponse:
    return page(request, "Model zoo", pages.zoo(connection(request).client.list_models()),
                active="/zoo")  # fmt: skip


@router.get("/evaluations")
def evaluations(request: Request) -> HTMLResponse:
    filters = Filters.parse(dict(request.query_params))
    conn = connection(request)
    listing = conn.client.list_evaluations(filters.query(pages.SHOWN))
    models = sorted(m.name for m in conn.client.list_models())
    body = pages.evaluations(listing, filters, models)
    return page(request, "Evaluations", body, active="/evaluations")


@router.get("/evaluations/{evaluation_id}")
def evaluation(request: Request, evaluation_id: str) -> HTMLResponse:
    record = connection(request).client.get_evaluation(evaluation_id)
    body = pages.evaluation(record, config(request).jaeger_url)
    return page(request, f"Evaluation {record.id[:12]}", body, active="/evaluations")


@router.get("/evaluations/{evaluation_id}/report")
def evaluation_report(request: Request, evaluation_id: str) -> HTMLResponse:
    conn = connection(request)
    return HTMLResponse(conn.reports.page([conn.client.get_evaluation(evaluation_id)]))


@router.get("/advice")
def advice_list(request: Request) -> HTMLResponse:
    listed = connection(request).client.list_advice()
    return page(request, "Advice", pages.advice_list(listed), active="/advice")


@router.get("/advice/{advice_id}")
def advice(request: Request, advice_id: str) -> HTMLResponse:
    record = one_advice(connection(request), advice_id)
    title = f"Advice {record.id[:8]}: {record.model} on {record.device_name}"
    return page(request, title, pages.advice(record), active="/advice")


@router.get("/advice/{advice_id}/report")
def advice_report(request: Request, advice_id: str) -> HTMLResponse:
    conn = connection(request)
    record = one_advice(conn, advice_id)
    ids = list(dict.fromkeys(r.evaluation_id for r in record.rows if r.evaluation_id))
    return HTMLResponse(conn.reports.page([conn.client.get_evaluation(i) for i in ids]))


def one_advice(conn: Connection, advice_id: str) -> AdviceRecord:
    found = [a for a in conn.client.list_advice() if a.id.startswith(advice_id.lower())]
    if len(found) != 1:
        which = "several advice records" if found else "no advice"
        raise NotFound(f"{which} with id {advice_id!r}; the Advice page lists them")
    return found[0]


@router.get("/compare")
def compare(request: Request) -> HTMLResponse:
    records = compared(connection(request), request.query_params.getlist("id"))
    return page(request, f"{len(records)} evaluations compared", pages.compare(records),
                active="/evaluations")  # fmt: skip


@router.get("/compare/report")
def compare_report(request: Request) -> HTMLResponse:
    conn = connection(request)
    return HTMLResponse(conn.reports.page(compared(conn, request.query_params.getlist("id"))))


def compared(conn: Connection, ids: list[str]) -> list[EvaluationRecord]:
    distinct = list(dict.fromkeys(i.strip().lower() for i in ids if i.strip()))
    if not 2 <= len(distinct) <= MAX_COMPARED:
        raise InvalidArgument(
            f"compare needs 2 to {MAX_COMPARED} different evaluations, got {len(distinct)}: "
            "tick them in the evaluations list (or give ?id=...&id=...)"
        )
    records = [conn.client.get_evaluation(i) for i in distinct]
    return list({r.id: r for r in records}.values())


@router.get("/run")
def run_form(request: Request) -> HTMLResponse:
    models = connection(request).client.list_models()
    chosen = {"model": request.query_params.get("model", "")}
    return page(request, "Run an evaluation", pages.run_form(models, chosen), active="/run")


@router.post("/run")
async def start_run(request: Request) -> Response:
    fields = dict(parse_qsl((await request.body()).decode(errors="replace")))

    def start() -> Response:
        conn = connection(request)
        models = conn.client.list_models()
        try:
            run = conn.runs.start(evaluation_request(fields, models))
        except (Unauthenticated, PermissionDenied):
            raise
        except MlmsError as exc:  # the form again, with what was typed and why it failed
            body = pages.run_form(models, fields, str(exc))
            return page(request, "Run an evaluation", body, active="/run", status=400)
        return RedirectResponse(f"/runs/{run.id}", status_code=303)

    return await run_in_threadpool(start)


@router.get("/runs/{run_id}")
def run(request: Request, run_id: str) -> HTMLResponse:
    found = connection(request).runs.get(run_id)
    return page(request, f"Evaluation of {found.request.model}", pages.run(found), active="/run")


@router.get("/runs/{run_id}/live")
def run_live(request: Request, run_id: str) -> HTMLResponse:
    return fragment(pages.run_live(connection(request).runs.get(run_id)))


@router.get("/login")
def login_form(request: Request, next: str = "/") -> HTMLResponse:
    return page(request, "Log in", pages.login(safe_next(next)))


@router.post("/login")
async def login(request: Request) -> Response:
    fields = dict(parse_qsl((await request.body()).decode(errors="replace")))
    target = safe_next(fields.get("next", "/"))
    try:
        session = await run_in_threadpool(connections(request).login, fields.get("token", ""))
    except (LoginRequired, Unauthenticated, PermissionDenied) as exc:
        status = 403 if isinstance(exc, PermissionDenied) else 401
        return page(request, "Log in", pages.login(target, refusal(exc)), status=status)
    response = RedirectResponse(target, status_code=303)
    set_session(request, response, session)
    return response


@router.post("/logout")
def logout(request: Request) -> RedirectResponse:
    connections(request).logout(request.cookies.get(COOKIE))
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(COOKIE, path="/")
    return response


def refusal(exc: MlmsError) -> str:
    if isinstance(exc, LoginRequired):
        return str(exc)
    return f"the server refused this token: {exc}"


def set_session(request: Request, response: Response, session: str) -> None:
    response.set_cookie(
        COOKIE,
        session,
        httponly=True,
        samesite="strict",
        secure=config(request).secure_cookies,
        path="/",
    )


def safe_next(target: str) -> str:
    """Only a path of this app: never another site (``//host`` or ``https://``)."""
    return target if target.startswith("/") and not target.startswith("//") else "/"

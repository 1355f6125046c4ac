"""The app: pages and API, errors as one clear line with a 4xx where the visitor can fix it,
security headers, and the static files (nothing is fetched from elsewhere)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import quote, urlsplit

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException

from mlms import __version__, errors
from mlms.client import Client
from mlms.ui import api, routes
from mlms.ui.config import UiConfig
from mlms.ui.connections import Connections, LoginRequired
from mlms.ui.html import frame, message

STATIC = Path(__file__).parent / "static"

#: HTTP status of each error mlms raises (``mlms.errors.STATUS``, after the UI's own); the
#: first class that matches wins.
STATUS: list[tuple[type[errors.MlmsError], int]] = [
    (LoginRequired, 401),
    *((cls, http) for cls, _code, http in errors.STATUS),
]
#: The app's own pages load only from here; the embedded report inlines its plotly.js and
#: styles, so it is only kept from being framed by other sites.
PAGE_POLICY = "default-src 'self'; frame-ancestors 'self'; form-action 'self'; base-uri 'none'"
REPORT_POLICY = "frame-ancestors 'self'; base-uri 'none'"


def create_app(config: UiConfig, remote: Callable[[str | None], Client] | None = None) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.connections.warm()
        yield
        app.state.connections.close()  # clients' channels and the runs' threads

    app = FastAPI(
        title="mlms", version=__version__, docs_url=None, redoc_url=None, lifespan=lifespan
    )
    app.state.connections = Connections(config, remote)
    app.include_router(api.router)
    app.include_router(routes.router)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.add_exception_handler(errors.MlmsError, _mlms_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _bad_request)  # type: ignore[arg-type]
    app.add_exception_handler(HTTPException, _http_error)  # type: ignore[arg-type]
    app.middleware("http")(_headers)
    return app


def _cross_site(request: Request) -> bool:
    """A form posted to this app from another site's page. Without a token (embedded, or a
    server without tokens) there is no SameSite cookie to stop it, and browsers name the
    posting page's origin."""
    if request.method in ("GET", "HEAD", "OPTIONS"):
        return False
    origin = request.headers.get("origin")
    return origin is not None and urlsplit(origin).netloc != request.headers.get("host")


def _is_api(request: Request) -> bool:
    return request.url.path.startswith("/api/")


def _error(request: Request, text: str, status: int) -> Response:
    if _is_api(request):
        return JSONResponse({"error": text}, status_code=status)
    html = frame("Error", message(text), signed_in=routes.signed_in(request))
    return HTMLResponse(html, status_code=status)


async def _mlms_error(request: Request, exc: errors.MlmsError) -> Response:
    if isinstance(exc, errors.Unauthenticated):  # the token (or none) stopped being accepted
        kept = getattr(request.state, "connection", None)
        if kept is not None:
            request.app.state.connections.refused(kept)
    status = next((code for cls, code in STATUS if isinstance(exc, cls)), 500)
    if status == 401 and not _is_api(request) and request.method == "GET":
        target = quote(request.url.path + (f"?{request.url.query}" if request.url.query else ""))
        return RedirectResponse(f"/login?next={target}", status_code=303)
    return _error(request, str(exc), status)


async def _bad_request(request: Request, exc: RequestValidationError) -> Response:
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    return _error(request, f"bad {where}: {first['msg']}", 400)


async def _http_error(request: Request, exc: HTTPException) -> Response:
    text = (
        f"no page at {request.url.path}"
        if exc.status_code == 404
        else f"{request.method} {request.url.path}: {exc.detail}"
    )
    return _error(request, text, exc.status_code)


async def _headers(request: Request, call_next) -> Response:
    if _cross_site(request):
        return _error(
            request, f"cross-site {request.method} refused: submit it from this app's pages", 403
        )
    response = await call_next(request)
    report = request.url.path.endswith("/report")
    response.headers["Content-Security-Policy"] = REPORT_POLICY if report else PAGE_POLICY
    response.headers["X-Content-Type-Options"] = "nosniff"
    # same-origin, not no-referrer: under no-referrer browsers post forms with "Origin: null",
    # which the cross-site check cannot tell from another site's.
    response.headers["Referrer-Policy"] = "same-origin"
    return response

"""Each mlms error means one thing on every wire: the gRPC code and the UI's HTTP status come
from one table (``mlms.errors.STATUS``)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import grpc
import pytest
import requests
import uvicorn

from mlms import errors
from mlms.rpc.status import status_of
from mlms.ui.app import create_app
from mlms.ui.command import bind
from mlms.ui.config import UiConfig
from tests.processes import wait_for

#: The gRPC code's usual HTTP status (Google's mapping): a UI status must not contradict it.
_HTTP_FAMILY = {
    "INVALID_ARGUMENT": {400},
    "FAILED_PRECONDITION": {400, 409},
    "NOT_FOUND": {404},
    "ALREADY_EXISTS": {409},
    "ABORTED": {409},
    "UNAVAILABLE": {502, 503},
    "DATA_LOSS": {500, 502},
    "UNAUTHENTICATED": {401},
    "PERMISSION_DENIED": {403},
    "RESOURCE_EXHAUSTED": {429},
}

ERRORS = sorted(
    (cls for cls in vars(errors).values() if isinstance(cls, type) and issubclass(cls, Exception)),
    key=lambda cls: cls.__name__,
)


@pytest.fixture(scope="module")
def ui_url() -> Iterator[str]:
    """The UI app, with one more API route that raises the error class it names."""
    app = create_app(UiConfig())

    @app.get("/api/raises/{name}")
    def raises(name: str) -> None:
        raise getattr(errors, name)(f"a {name} for the test")

    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, 30, "uvicorn to start")
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


def _http_status(url: str, cls: type[errors.MlmsError]) -> int:
    """The status the UI's API answers when a handler raises ``cls``."""
    response = requests.get(f"{url}/api/raises/{cls.__name__}", timeout=30)
    assert response.json() == {"error": f"a {cls.__name__} for the test"}
    return response.status_code


@pytest.mark.parametrize("cls", [c for c in ERRORS if c is not errors.MlmsError], ids=str)
def test_grpc_code_and_http_status_agree(ui_url: str, cls: type[errors.MlmsError]) -> None:
    code = status_of(cls("x"))
    assert code != grpc.StatusCode.INTERNAL, f"{cls.__name__} has no code"
    assert _http_status(ui_url, cls) in _HTTP_FAMILY[code.name]


def test_a_bad_manifest_is_a_precondition_not_a_server_error(ui_url: str) -> None:
    assert status_of(errors.ManifestError("x")) == grpc.StatusCode.FAILED_PRECONDITION
    assert _http_status(ui_url, errors.ManifestError) == 400

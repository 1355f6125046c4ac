"""What every route needs from a request: its visitor's connection."""

from __future__ import annotations

from fastapi import Request

from mlms.ui.config import UiConfig
from mlms.ui.connections import COOKIE, Connection, Connections


def connections(request: Request) -> Connections:
    return request.app.state.connections


def config(request: Request) -> UiConfig:
    return connections(request).config


def connection(request: Request) -> Connection:
    """The visitor's connection (``LoginRequired`` when the server wants a token first); kept
    on the request so that an UNAUTHENTICATED answer can end its session."""
    found = connections(request).for_session(request.cookies.get(COOKIE))
    request.state.connection = found
    return found


def signed_in(request: Request) -> bool:
    return COOKIE in request.cookies

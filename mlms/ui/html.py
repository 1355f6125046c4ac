"""Escaping, tables and the frame every page shares (navigation, stylesheet, script)."""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from urllib.parse import urlencode

NAV = [
    ("/fleet", "Fleet"),
    ("/zoo", "Zoo"),
    ("/evaluations", "Evaluations"),
    ("/advice", "Advice"),
    ("/run", "Run"),
]


def e(value: object) -> str:
    """Text or an attribute value, escaped."""
    return html.escape("" if value is None else str(value), quote=True)


def link(href: str, text: object, **query: str | Sequence[str]) -> str:
    if query:
        href = f"{href}?{urlencode(query, doseq=True)}"
    return f'<a href="{e(href)}">{e(text)}</a>'


def number(value: float | None, digits: int = 3) -> str:
    return "" if value is None else f"{value:,.{digits}f}"


def table(
    headers: Sequence[str], rows: Iterable[Sequence[str]], *, table_id: str = "", raw: bool = False
) -> str:
    """A table of cells; ``raw``: the cells are HTML already (links, checkboxes), else text."""
    ident = f' id="{e(table_id)}"' if table_id else ""
    head = "".join(f"<th>{e(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{c if raw else e(c)}</td>" for c in row) + "</tr>" for row in rows
    )
    # In a box of its own that scrolls sideways: a table wider than the window (long model
    # and GPU names) would otherwise widen the page and go off its right edge.
    return (
        f'<div class="scroll"><table class="data"{ident}><thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table></div>"
    )


def frame(title: str, body: str, *, active: str = "", signed_in: bool = False) -> str:
    """The whole document around ``body``: everything it loads comes from this app."""
    nav = "".join(
        f'<a href="{href}"{" class=active" if href == active else ""}>{text}</a>'
        for href, text in NAV
    )
    logout = (
        '<form method="post" action="/logout" class="logout"><button>log out</button></form>'
        if signed_in
        else ""
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{e(title)} · mlms</title>
<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">
<link rel="stylesheet" href="/static/ui.css">
<script src="/static/ui.js" defer></script>
</head><body>
<header><span class="brand">mlms</span><nav>{nav}</nav>{logout}</header>
<main><h1>{e(title)}</h1>
{body}
</main></body></html>"""


def message(text: str, kind: str = "error") -> str:
    return f'<p class="{kind}" role="alert">{e(text)}</p>'

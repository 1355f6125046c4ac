"""``mlms ui``: the web app over the fleet and its results (pages and a JSON API).

FastAPI on uvicorn: FastAPI is maintained, typed, validates with the pydantic models mlms already
uses, and runs plain (``def``) handlers in a thread pool, so the blocking client the CLI uses
(embedded, or gRPC to a server) is called as it is, without an async rewrite. uvicorn is its
usual ASGI server, takes TLS files directly and serves on a socket bound beforehand (port 0 in
tests). Pages are rendered here as HTML strings (no template engine: a few small pages); the
browser gets one stylesheet and one script from ``static/`` and nothing from elsewhere.

    config.py       what ``mlms ui`` was started with
    connections.py  the client of each browser session (tokens stay here, not in the browser)
    search.py       the evaluations search: query parameters to the index's query
    runs.py         evaluations started from the form, with their progress
    reports.py      the report of ``mlms report`` per evaluation(s), cached; the Chrome trace
    fleet.py        agents, hardware and load
    html.py         escaping, tables, the page frame
    pages.py        each page's body
    routes.py       the pages' routes;  api.py  the JSON API's routes
    app.py          the app: routes, error pages, headers, static files
    command.py      the ``mlms ui`` command
"""

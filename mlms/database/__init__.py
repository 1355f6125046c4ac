"""The evaluation index: every stored record's queryable fields in SQL.

The object store stays the archive (records as JSON, span archives as Parquet); the database
holds what listings filter, sort and aggregate on, and can always be rebuilt from the store
(``mlms db rebuild``). SQLite under ``$MLMS_HOME`` embedded (no set-up), PostgreSQL for a fleet
(``--database postgresql://...``, every server and agent the same). SQLAlchemy Core builds the
statements for both dialects; Alembic migrations create and upgrade the schema.

    schema.py      tables and indexes (the migrations' target)
    connect.py     URLs, engines (SQLite in WAL mode), migrating to the head revision
    rows.py        a record as table rows; a row as a summary
    index.py       the index: claim (first writer wins), add, list pages, named views
    catch_up.py    indexing the records stored while no index took them (before a listing)
    keeper.py      the store's side: rebuilding from the store, a server's upkeep
    migrations/    Alembic's environment and revisions

SQLAlchemy is imported only by the modules of this package, which the CLI imports inside the
commands that need them.
"""

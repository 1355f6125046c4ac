"""Load scenarios on the predict path: MLPerf LoadGen's four, and a perf_analyzer-like
concurrency sweep.

``targets`` is what is driven (a predictor in this process, or an agent through a server);
``scenarios`` runs LoadGen on a target and ``logs`` reads what LoadGen wrote; ``concurrency``
is the closed-loop sweep; ``record`` is what is stored beside LoadGen's logs.
"""

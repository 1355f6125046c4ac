"""``mlms advise``: which configuration of a model to run on a device, predicted from stored
evaluations, the lower bound's what-ifs and short probe runs, then proved by measurement.

    record.py   the request and the advice record (``advice/<id>.json``)
    space.py    the configurations a device and its frameworks admit, and what was left out
    predict.py  the multiplicative model: per-factor effects, batch scaling, intervals
    run.py      probes, prediction, verification, the recommendation
    tables.py   the advice as tables (the CLI and the report)
"""

"""The mlms server: dispatch (selection, retries, jobs) and the ``Evaluator`` service."""

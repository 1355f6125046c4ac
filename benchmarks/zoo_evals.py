"""``mlms eval`` of several models in one process, each with the same options, as the zoo_sweep
plan's non-sweep cells run them: a process a model would pay torch's import and the CUDA
context's start-up (seconds on a GPU machine) once per model, more than many evaluations take.
Each model's output is the command's own (its ``evaluation ID`` line among it), after a line
``== MODEL``; a model that fails prints its one ``mlms: error:`` line and the others still run
(the exit status stays 0: a failure is a finding, listed by ``zoo_findings``). An interrupt (the
kit cutting the cell at its time) ends the whole run with mlms's status 130: a library whose
import it broke off would fail every later model with a misleading error.

    python benchmarks/zoo_evals.py resnet50,vgg16 -f torch -b 16 -t framework
"""

from __future__ import annotations

import sys

#: What precedes each model's output, so that a reader of the log (``zoo_findings``) knows
#: whose error line follows.
MARK = "== "
#: mlms's exit status for an interrupted command (SIGINT: Ctrl-C, or the kit's cut).
INTERRUPTED = 130


def run(models: list[str], options: list[str]) -> int:
    """The number of models whose evaluation failed."""
    from mlms.cli.main import main
    from mlms.library_errors import TRACEBACKS

    failed = 0
    for model in models:
        print(f"{MARK}{model}", flush=True)
        sys.argv = ["mlms", "eval", "--model", model, *options]
        handlers = list(TRACEBACKS.handlers)
        try:
            main()
        except SystemExit as exc:  # main's exit for an error it printed as one line
            if exc.code == INTERRUPTED:
                raise
            failed += exc.code not in (None, 0)
        except Exception as exc:  # one model's bug leaves the others running
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            print(f"mlms: error: {type(exc).__name__}: {first}", file=sys.stderr, flush=True)
            failed += 1
        # Each main() adds its log file's handler: the next model's tracebacks go there once.
        for handler in TRACEBACKS.handlers[len(handlers) :]:
            handler.close()
        TRACEBACKS.handlers[:] = handlers
        sys.stdout.flush()
        sys.stderr.flush()
    return failed


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
        sys.exit("usage: zoo_evals.py MODEL[,MODEL...] [mlms eval options]")
    names = sys.argv[1].split(",")
    failures = run(names, sys.argv[2:])
    # Exit status 0: every model ran to its end, its failure (if any) one line of the log for
    # zoo_findings; the kit keeps "failed" for a cell that broke off.
    print(f"{failures} of {len(names)} models failed", flush=True)

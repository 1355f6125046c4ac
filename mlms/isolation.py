"""Work that runs in a fresh interpreter, because its native libraries must not share a process.

TensorFlow's wheel loads ``_pywrap_tensorflow_internal`` with RTLD_GLOBAL, which puts the LLVM
it bundles (exported from ``libtensorflow_framework.so.2``) into the process's global symbol
scope. torch's Triton (``triton/_C/libtriton.so``, loaded by torch.profiler, torch.export,
torch.fx's fake tensors and the optimizers through ``torch._dynamo``) bundles another LLVM with
default visibility and lazy binding, so once TensorFlow is loaded, Triton's calls into LLVM bind
to TensorFlow's copy: its static constructors (``llvm::DebugCounter`` in PassBuilder.cpp)
corrupt the heap and the process dies with SIGSEGV. Loading Triton first only moves the clash
to Triton's later, lazily bound calls. So in mlms a process runs TensorFlow or torch's compiler
stack, never both: TensorFlow evaluates in an agent of its own
(``mlms.predictors.registry.runs_apart``) and model assets are built in a process of their
own (``mlms.zoo.assets``).
"""

from __future__ import annotations

import multiprocessing
import pickle
import signal
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any, TypeVar

from mlms.errors import MlmsError

T = TypeVar("T")


def call_in_own_process(
    function: Callable[..., T], *args: Any, what: str, error: type[MlmsError] = MlmsError
) -> T:
    """``function(*args)`` in a fresh interpreter (multiprocessing's spawn: nothing this process
    has imported comes along), and its return value; the exception it raised is raised here.

    ``function`` must be importable by name and its arguments and result picklable. A child
    that dies without answering (a crash in native code) raises ``error`` naming ``what`` and
    how it ended."""
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=_answer, args=(sender, function, args), name=what)
    process.start()
    sender.close()  # the child holds the only writer: its death is an EOF here
    try:
        try:
            ok, value = receiver.recv()
        except EOFError:
            process.join()
            raise error(
                f"{what} ended with {_ending(process.exitcode)} before it answered"
            ) from None
    finally:
        receiver.close()
        process.join(timeout=30)
        if process.is_alive():  # answered but stuck in its exit: it has nothing left to give
            process.kill()
            process.join()
    if ok:
        return value
    raise value


def _answer(sender: Connection, function: Callable[..., Any], args: tuple[Any, ...]) -> None:
    try:
        answer: tuple[bool, Any] = (True, function(*args))
    except BaseException as exc:  # every failure goes back to the caller, which re-raises it
        answer = (False, exc)
    try:
        payload = pickle.dumps(answer)
    except Exception as exc:  # an exception (or a result) that cannot cross the pipe
        payload = pickle.dumps((False, MlmsError(f"{answer[1]!r} (not picklable: {exc})")))
    sender.send_bytes(payload)
    sender.close()


def _ending(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            return f"signal {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"signal {-exitcode}"
    return f"exit status {exitcode}"

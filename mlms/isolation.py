"""Work that runs in a process of its own, because its native libraries must not share one.

TensorFlow's wheel loads ``_pywrap_tensorflow_internal`` with RTLD_GLOBAL, which puts the LLVM
it bundles (exported from ``libtensorflow_framework.so.2``) into the process's global symbol
scope. torch's Triton (``triton/_C/libtriton.so``, loaded by torch.profiler, torch.export,
torch.fx's fake tensors and the optimizers through ``torch._dynamo``) bundles another LLVM with
default visibility and lazy binding, so once TensorFlow is loaded, Triton's calls into LLVM bind
to TensorFlow's copy: its static constructors (``llvm::DebugCounter`` in PassBuilder.cpp)
corrupt the heap and the process dies with SIGSEGV (torch imported first changes nothing:
Triton loads later, on first use). Loading Triton before TensorFlow is no cure either:
libtriton binds lazily (no BIND_NOW), so its calls not yet made would bind to TensorFlow's copy.
So in mlms a process runs TensorFlow or torch's compiler stack, never both: TensorFlow
evaluates in an agent of its own (``mlms.frameworks.runs_apart``), model assets are
built in a process of their own (``mlms.assets.manager``), and a bound asked of a process that
holds TensorFlow runs in one of its own (``mlms.bounds.run``).

The children are forked from a server process of multiprocessing's ``forkserver``, started
once per calling process from a fresh interpreter that imports ``mlms.isolation_preload``:
a child then starts with torch and the ONNX exporter's libraries loaded (about 2 s of CPU
each that it would otherwise spend importing them) and nothing else of the caller's. That
preload holds neither TensorFlow nor anything that loads Triton (``torch._dynamo`` does), so
a child may still load either one. The server lives as long as the process that started it,
idle between calls, holding what it imported (about 0.6 GB of memory with torch).

A child ends without running exit handlers (multiprocessing's ``os._exit``), so the temporary
files its libraries delete at exit would stay (TensorFlow's autograph leaves a module in the
temporary folder for each function it converts): its temporary folder is one of its own, which
the caller removes once the child has ended.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import tempfile
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any, TypeVar

from mlms.errors import MlmsError

T = TypeVar("T")


#: A child that has answered only has its interpreter to shut down.
EXIT_TIMEOUT_S = 30.0


def _context() -> multiprocessing.context.BaseContext:
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["mlms.isolation_preload"])  # read when the server starts
    return context


def call_in_own_process(
    function: Callable[..., T],
    *args: Any,
    what: str,
    error: type[MlmsError] = MlmsError,
    on_note: Callable[[Any], None] | None = None,
) -> T:
    """``function(*args)`` in a process of its own (forked from the fork server: nothing this
    process has imported comes along, only the server's preload; the environment is this
    process's as it is now, but for ``TMPDIR``: a folder of the child's own, removed when it has
    ended), and its return value; the exception it raised is raised here.

    ``function`` must be importable by name and its arguments and result picklable. With
    ``on_note``, it is called with ``tell=`` too: each ``tell(note)`` in the child is an
    ``on_note(note)`` here (progress) before the answer. A child that dies without answering (a
    crash in native code) raises ``error`` naming ``what`` and how it ended."""
    context = _context()
    with tempfile.TemporaryDirectory(prefix="mlms-child-", ignore_cleanup_errors=True) as scratch:
        environ = {**os.environ, "TMPDIR": scratch}
        return _run(context, function, args, environ, what, error, on_note)


def _run(
    context: multiprocessing.context.BaseContext,
    function: Callable[..., T],
    args: tuple[Any, ...],
    environ: dict[str, str],
    what: str,
    error: type[MlmsError],
    on_note: Callable[[Any], None] | None,
) -> T:
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(
        target=_answer,
        args=(sender, function, args, on_note is not None, environ),
        name=what,
    )
    process.start()
    sender.close()  # the child holds the only writer: its death is an EOF here
    answered = False
    try:
        while True:
            try:
                message = receiver.recv()
            except EOFError:
                process.join()
                raise error(
                    f"{what} ended with {_ending(process.exitcode)} before it answered"
                ) from None
            if message[0] == "note" and on_note is not None:
                on_note(message[1])
                continue
            _, ok, value = message
            answered = True
            break
    finally:
        receiver.close()
        if answered:
            process.join(timeout=EXIT_TIMEOUT_S)
        if process.is_alive():  # stuck after answering, or the caller gave up on it
            process.kill()
        process.join()
    if ok:
        return value
    raise value


def _answer(
    sender: Connection,
    function: Callable[..., Any],
    args: tuple[Any, ...],
    notes: bool,
    environ: dict[str, str],
) -> None:
    # The fork server's environment is the caller's when the server started.
    os.environ.clear()
    os.environ.update(environ)
    tempfile.tempdir = None  # the fork server's choice, made before TMPDIR named this child's

    def tell(note: Any) -> None:
        sender.send(("note", note))

    try:
        result = function(*args, tell=tell) if notes else function(*args)
        answer: tuple[str, bool, Any] = ("answer", True, result)
    except BaseException as exc:  # every failure goes back to the caller, which re-raises it
        answer = ("answer", False, exc)
    try:
        payload = pickle.dumps(answer)
    except Exception as exc:  # an exception (or a result) that cannot cross the pipe
        failure = MlmsError(f"{answer[2]!r} (not picklable: {exc})")
        payload = pickle.dumps(("answer", False, failure))
    sender.send_bytes(payload)
    sender.close()


def _ending(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            return f"signal {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"signal {-exitcode}"
    return f"exit status {exitcode}"

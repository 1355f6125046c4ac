"""``mlms server --workers N``: N server processes sharing one port, so the server uses N cores.

Python runs one thread at a time per process, so one server process answers from one core
however many it has. Here the parent serves nothing: it binds the port with ``SO_REUSEPORT``
(keeping it while it runs, so a port 0 chosen once stays this server's) and starts N workers,
each a whole ``Server`` bound to the same port with ``SO_REUSEPORT``; the kernel spreads the
connections over them (grpc's own multiprocessing example). Each worker is a server of the
fleet like any other (its own id, lease and jobs, the shared registry, store and index), which
the server's statelessness makes safe.

- The address file is written once every worker serves.
- A worker that exits ends the whole server: the parent stops the others and exits with one
  line naming it, so that whoever supervises the server (systemd, Kubernetes) restarts it whole.
- SIGTERM or SIGINT: SIGTERM to every worker (each stops within ``--grace``), SIGKILL to any left
  ``KILL_AFTER`` seconds later. A parent killed outright takes its workers with it (each asks the
  kernel for SIGTERM on its parent's death, Linux's PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing
import socket
from collections.abc import Callable

from mlms.errors import Unavailable
from mlms.parent_death import end_with_parent
from mlms.rpc.serving import advertised, split_address, write_address_file

log = logging.getLogger(__name__)

#: Seconds past the workers' grace period before SIGKILL.
KILL_AFTER = 10.0
#: Seconds a worker may take to serve (imports, the registry, the index).
START_TIMEOUT = 120.0


def reserve_port(listen: str) -> socket.socket:
    """A socket bound to ``listen`` with SO_REUSEPORT and not listening: it holds the port
    (port 0: a free one, chosen here) without taking connections."""
    host, port = split_address(listen)
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    reserved = socket.socket(family, socket.SOCK_STREAM)
    reserved.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        reserved.bind((host.strip("[]"), port))
    except OSError as exc:
        reserved.close()
        raise Unavailable(f"cannot listen on {listen}: {exc.strerror}") from exc
    return reserved


def serve(config, workers: int, stopped: Callable[[float], bool]) -> None:
    """Run ``workers`` server processes on ``config.listen`` until ``stopped(seconds)`` (a
    signal's wait) says so. ``config``: a ``ServerConfig``."""
    reserved = reserve_port(config.listen)
    host, _ = split_address(config.listen)
    port = reserved.getsockname()[1]
    shared = dataclasses.replace(config, listen=f"{host}:{port}", address_file=None)
    spawn = multiprocessing.get_context("spawn")  # no fork of a process that holds gRPC
    ready = spawn.Queue()
    processes = [
        spawn.Process(target=_worker, args=(shared, n, ready), name=f"worker {n}")
        for n in range(workers)
    ]
    try:
        for process in processes:
            process.start()
        for _ in processes:
            _await_ready(ready, processes)
        log.info("server: %d workers serving on %s:%d", workers, host, port)
        if config.address_file is not None:
            write_address_file(config.address_file, advertised(config.listen, None, port))
        while not stopped(0.5):
            ended = [p for p in processes if not p.is_alive()]
            if ended:
                raise Unavailable(
                    f"server {ended[0].name} exited with status {ended[0].exitcode}; "
                    "stopping the others"
                )
    finally:
        _stop(processes, config.grace)
        reserved.close()


def _await_ready(ready, processes: list) -> None:
    import queue

    waited = 0.0
    while waited < START_TIMEOUT:
        try:
            ready.get(timeout=0.5)
            return
        except queue.Empty:
            waited += 0.5
        ended = [p for p in processes if p.exitcode is not None]
        if ended:
            raise Unavailable(
                f"server {ended[0].name} exited with status {ended[0].exitcode} before it "
                "served; see its lines above"
            )
    raise Unavailable(f"a server worker did not serve within {START_TIMEOUT:.0f} s")


def _stop(processes: list, grace: float) -> None:
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(grace + KILL_AFTER)
        if process.is_alive():
            process.kill()
            process.join()


def _worker(config, number: int, ready) -> None:
    """One worker: a whole server on the shared port, stopped by SIGTERM."""
    from mlms.rpc.serving import StopSignal
    from mlms.server.process import serve

    end_with_parent()
    logging.basicConfig(
        level=logging.INFO,
        format=f"%(asctime)s %(levelname)s worker {number} %(name)s: %(message)s",
    )
    serve(config, StopSignal(), reuse_port=True, started=lambda: ready.put(number))

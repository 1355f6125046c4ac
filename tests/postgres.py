"""A real PostgreSQL server for the tests: Debian's (``/usr/lib/postgresql/*/bin``), in a temp
folder, on a free loopback port, with trust authentication on loopback only.

PostgreSQL refuses to run as root, so as root it runs as the ``postgres`` user (the package
creates it), with the folder handed to that user. ``PostgresServer.url`` is a database of its
own per ``database()`` call, so tests do not see each other's rows.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

from tests.processes import PortTaken, free_port, start_on_free_ports

USER = "postgres"


def postgres_bin() -> Path | None:
    """The newest installed PostgreSQL's bin folder (MLMS_POSTGRES_BIN overrides)."""
    given = os.environ.get("MLMS_POSTGRES_BIN")
    if given:
        return Path(given) if (Path(given) / "initdb").exists() else None
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_major)
    return Path(found[-1]).parent if found else None


def _major(path: str) -> int:
    return int(Path(path).parts[-3]) if Path(path).parts[-3].isdigit() else 0


def unavailable() -> str | None:
    """Why no server can start here (None: one can)."""
    if postgres_bin() is None:
        return "no PostgreSQL: run scripts/setup.sh as root (apt-get install postgresql)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(USER)
        except KeyError:
            return f"PostgreSQL refuses root and there is no {USER!r} user to run it as"
    return None


class PostgresServer:
    def __init__(self, root: Path | None = None) -> None:
        """``root``: a folder of its own (default: a new one under the system's temp folder,
        which the ``postgres`` user can reach, unlike pytest's private ones)."""
        self.root = root or Path(tempfile.mkdtemp(prefix="mlms-postgres-"))
        self.data = self.root / "data"
        self.port = free_port()
        self._started = False
        self.bin = postgres_bin()
        assert self.bin is not None, unavailable()

    def _run(self, *command: str) -> subprocess.CompletedProcess:
        argv = list(command)
        if os.geteuid() == 0:
            argv = ["runuser", "-u", USER, "--", *argv]
        return subprocess.run(argv, check=True, capture_output=True, text=True, timeout=120)

    def start(self) -> PostgresServer:
        self.root.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            user = pwd.getpwnam(USER)
            os.chown(self.root, user.pw_uid, user.pw_gid)
        if not self.data.exists():
            self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", USER,
                      "--auth=trust", "--no-sync", "-E", "UTF8")  # fmt: skip
        if self._started:
            return self._launch()  # a restart keeps its address, which its clients know
        self._started = True
        return start_on_free_ports(self._launch, self._pick_port)

    def _pick_port(self) -> None:
        self.port = free_port()

    def _launch(self) -> PostgresServer:
        log = self.root / "log"
        start_of_log = log.stat().st_size if log.exists() else 0
        options = (
            f"-c listen_addresses=127.0.0.1 -c port={self.port} -c unix_socket_directories="
            f"{self.root} -c fsync=off -c max_connections=200"
        )
        try:
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", options,
                      "-l", str(log), "-w", "-t", "60", "start")  # fmt: skip
        except subprocess.CalledProcessError:
            with open(log, "rb") as said:
                said.seek(start_of_log)
                if b"Address already in use" in said.read():
                    raise PortTaken(f"PostgreSQL's port {self.port} was taken") from None
            raise
        return self

    @property
    def running(self) -> bool:
        try:
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "status")
        except subprocess.CalledProcessError:
            return False
        return True

    def stop(self, mode: str = "fast") -> None:
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def database(self) -> str:
        """A new, empty database's URL."""
        name = f"mlms_{uuid.uuid4().hex[:12]}"
        self._run(str(self.bin / "createdb"), "-h", "127.0.0.1", "-p", str(self.port),
                  "-U", USER, name)  # fmt: skip
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{name}"

    def remove(self) -> None:
        if self.running:
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

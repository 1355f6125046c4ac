"""The GPU run kit: one entry point for every GPU script on a lent GPU machine (the device tool).

A *plan* (``benchmarks/plans/NAME.py``, or any file given by path) lists *cells*: commands,
each writing its results into a folder of its own. ``run`` executes the plan's cells in order
within a time budget and stores each cell's folder as the cell ends; cells already done in the
results folder (``benchmarks/results/<plan's RESULTS>``, which travels with the working tree) are
skipped, so the next call resumes where the budget cut the last one; a cell whose product stays
on the machine (``Cell.on_machine``: built model assets) is skipped only where an earlier call
on the same machine did it; a failed cell is skipped too (``--retry-failed`` runs it), unless
it failed on other code than the call carries. What a call produced (the new cells' folders and
what it added to the mlms store or changed there: records, sweeps, span archives, never the
model assets) is packed into at most 8 files under OUT; ``unpack`` merges them into the results
folder here. The store's folders that a plan names in ``STORE_CARRIED`` (the perfdb's layer
benchmarks) go back the other way: a call puts what earlier calls brought back into the
machine's store, so a fresh machine reuses them.
``--one-gpu-each`` runs as many cells at once as the machine has GPUs, each cell seeing one of
them (its UUID in ``CUDA_VISIBLE_DEVICES``, named in its ``cell.json``), for plans whose cells
need one GPU each and nothing of each other: a 2-GPU machine then runs such a plan in about
half the device minutes.

    python3 benchmarks/gpu_kit.py run PLAN OUT [--budget S] [--only a,b] [--retry-failed]
                                               [--one-gpu-each]
    .venv/bin/python benchmarks/gpu_kit.py run PLAN OUT --dry     # the same plan, small, on the CPU
    .venv/bin/python benchmarks/gpu_kit.py unpack FILES_AT [--into DIR]
    .venv/bin/python benchmarks/gpu_kit.py summary PLAN [--results DIR]
    .venv/bin/python benchmarks/gpu_kit.py wheels PLAN    # .whl-kit/: benchmarks/gpu_wheels.txt
    .venv/bin/python benchmarks/gpu_kit.py check PLAN     # before a call: wheels, carry size
    (wheels, check and run take --groups a,b: a call's wheel groups instead of the plan's)

On the GPU machine the carried wheels (``.whl-kit/``: mlms's dependencies that the image lacks,
pinned in ``benchmarks/gpu_wheels.txt``, installed here for the image's Python and packed with
xz) are unpacked once per machine: a second call on the same warm machine finds them unpacked
and goes straight to the cells. The image's
own torch, transformers and timm are used where they are in mlms's ranges. The device tool's call:

    run(command="python3 benchmarks/gpu_kit.py run PLAN $OUT", carry=[".whl-kit"], kind=...)

A call whose .whl-kit/ lacks a wheel of the plan's groups stops before its first cell, naming
what is missing; ``check`` says so here, and whether the working tree with .whl-kit/ and
.kit-src/ fits in the 64 MiB one call carries (where not, it names the largest results folders
that a call can leave behind: moved out of the checkout for the call, back after it). Then,
here, ``python3 benchmarks/gpu_kit.py unpack FILES_AT`` and commit the results folder. To
measure one commit while the working tree changes, ``snapshot [COMMIT]`` puts that commit's code
in .kit-src/; the call then carries it too and runs ``python3 .kit-src/benchmarks/gpu_kit.py``.
Each cell's outcome names the code it ran by a digest of its code files as git hashes them
(``code``); ``unpack`` adds the commit that holds that code (``code_commit``), or says none
does: the lent machine's .git may be older than the files it carries.
The kit uses the standard library only: it runs before anything is installed.

A dry run emulates the image's packages: its cells' processes cannot import a package that is
neither on the image (``benchmarks/gpu_image_packages.txt``) nor among the plan's wheels, so a
cell that would fail on the GPU for want of one fails here first, before GPU minutes are spent.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import hashlib
import importlib.util
import io
import itertools
import json
import lzma
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Iterable
from functools import lru_cache, partial
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
# A snapshot (``snapshot``: one commit's code in .kit-src/ of the repository) runs that commit's
# code while the results and the wheels stay the repository's.
SNAPSHOT = ROOT / "KIT_SNAPSHOT"
REPO = ROOT.parent if SNAPSHOT.is_file() else ROOT
SNAPSHOT_DIR = REPO / ".kit-src"
WHEELS = REPO / ".whl-kit"
WHEEL_LIST = ROOT / "benchmarks" / "gpu_wheels.txt"
#: In .whl-kit/: the plan's wheels installed for the image's Python, packed (xz packs them into
#: two thirds of the wheels' own size), and the pins they are.
SITE = "site.tar.xz"
PINS = "PINS"
#: What one device call carries at most: the working tree and the folders named to carry.
CARRY_LIMIT = 64 * 2**20
IMAGE_LIST = ROOT / "benchmarks" / "gpu_image_packages.txt"
PLANS = ROOT / "benchmarks" / "plans"
RESULTS = REPO / "benchmarks" / "results"
MACHINE = Path("/tmp/mlms-kit")  # survives between calls while the machine stays warm
# What the device tool brings back: at most 8 files of 16 MiB each, 64 MiB together.
MAX_FILES = 8
PART_BYTES = 15 * 2**20
PACK_RESERVE_S = 25.0
NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
# Every process on a shared multi-GPU host keeps NVLink multicast off.
GPU_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
    "PYTHONUNBUFFERED": "1",
    "KINETO_LOG_LEVEL": "5",
    "USE_TF": "0",
    "TF_CPP_MIN_LOG_LEVEL": "3",
}


@dataclasses.dataclass(frozen=True)
class Kit:
    """What a plan sees when it lists its cells."""

    dry: bool
    python: str
    gpus: tuple[str, ...]  # the GPUs' names, empty on the CPU
    # The results folder this call adds to (its cells' folders and the store's files that
    # earlier calls brought back): a plan may leave out what it holds already.
    results: Path | None = None

    @property
    def hw(self) -> str:
        """The ``--hw`` of the machine's GPUs for mlms (``h200``, ``h100``, ``gpu``), ``cpu``."""
        if self.dry or not self.gpus:
            return "cpu"
        found = re.search(r"[A-Z]\d{2,3}", self.gpus[0].upper())
        return found.group(0).lower() if found else "gpu"


@dataclasses.dataclass(frozen=True)
class Cell:
    """One command of a plan. ``{out}`` in ``argv`` becomes the cell's folder, ``{python}`` the
    interpreter; the command also finds its folder as ``$KIT_CELL_OUT``."""

    name: str
    argv: tuple[str, ...]
    timeout_s: float = 600.0
    # A cell that the budget would give less time than this is left for the next call.
    min_s: float = 30.0
    # With --one-gpu-each: no other cell runs beside it (one that loads the whole host).
    alone: bool = False
    # What it makes stays on the machine (model assets built into the machine's store): done
    # only where an earlier call on this machine did it, whatever the results folder says.
    on_machine: bool = False

    def __post_init__(self) -> None:
        if not NAME.match(self.name):
            raise ValueError(f"cell name {self.name!r}: expected letters, digits, '.', '_', '-'")


@dataclasses.dataclass(frozen=True)
class Plan:
    name: str
    results: str  # the folder under benchmarks/results
    cells: Callable[[Kit], list[Cell]]
    summarize: Callable[[Path], str] | None
    wheels: tuple[str, ...]  # groups of benchmarks/gpu_wheels.txt beyond "base"
    gpus_per_cell: int = 1  # what one cell uses: a plan of splits says so (GPUS_PER_CELL)
    # Folders of the mlms store (``perfdb/``) that earlier calls brought back and a call puts
    # into a fresh machine's store, so that its cells reuse them (STORE_CARRIED).
    store_carried: tuple[str, ...] = ()


def load_plan(spec: str) -> Plan:
    path = Path(spec) if spec.endswith(".py") else PLANS / f"{spec}.py"
    if not path.is_file():
        known = sorted(p.stem for p in PLANS.glob("*.py") if p.stem != "__init__")
        raise SystemExit(f"gpu_kit: no plan {spec!r}: expected one of {known} or a .py file")
    if str(ROOT) not in sys.path:  # plans import the kit's Cell and Kit as benchmarks.gpu_kit
        sys.path.insert(0, str(ROOT))
    module_spec = importlib.util.spec_from_file_location(f"kit_plan_{path.stem}", path)
    if module_spec is None or module_spec.loader is None:
        raise SystemExit(f"gpu_kit: {path} cannot be loaded as a Python module")
    module: ModuleType = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return Plan(
        name=path.stem,
        results=getattr(module, "RESULTS", path.stem),
        cells=module.cells,
        summarize=getattr(module, "summarize", None),
        wheels=tuple(getattr(module, "WHEELS", ())),
        gpus_per_cell=int(getattr(module, "GPUS_PER_CELL", 1)),
        store_carried=tuple(getattr(module, "STORE_CARRIED", ())),
    )


def with_groups(plan: Plan, groups: str | None) -> Plan:
    """``plan`` carrying the wheel groups ``groups`` names (comma-separated; ``base`` alone:
    none beyond it) instead of its ``WHEELS``: a call whose cells import less than the whole
    plan carries less, and its dry run hides what it leaves out."""
    if groups is None:
        return plan
    known = {group for groups, _pin in _wheel_list() for group in groups}
    chosen = tuple(dict.fromkeys(g for g in groups.split(",") if g and g != "base"))
    unknown = [group for group in chosen if group not in known]
    if unknown:
        raise SystemExit(f"gpu_kit: no wheel groups {unknown} in {WHEEL_LIST.name}: expected "
                         f"some of {sorted(known)}")  # fmt: skip
    return dataclasses.replace(plan, wheels=chosen)


# --- on the machine: wheels, then the cells ---------------------------------------------------


def install_wheels(wheels: Path, site: Path) -> str:
    """Unpack the carried site (``SITE``: the wheels installed here for the image's Python,
    packed with xz) into ``site`` unless this machine has it already (the same archive: its
    name and size hashed into a marker)."""
    packed = wheels / SITE
    digest = hashlib.sha256(
        f"{packed.name} {packed.stat().st_size}".encode() if packed.is_file() else b""
    ).hexdigest()
    marker = site / ".kit-wheels"
    pins = len(_held_pins(wheels))
    if marker.is_file() and marker.read_text() == digest:
        return f"wheels: {pins} installed already"
    # An older install's dist-info would shadow a newer wheel's: start from nothing.
    shutil.rmtree(site, ignore_errors=True)
    began = time.monotonic()
    site.mkdir(parents=True)
    if packed.is_file():
        with tarfile.open(packed, "r:xz") as tar:
            tar.extractall(site, filter="data")
    marker.write_text(digest)
    return f"wheels: {pins} installed in {time.monotonic() - began:.0f} s"


def unpack_etcd(wheels: Path, bin_dir: Path) -> Path | None:
    """The carried etcd server (``etcd.xz``: the GPU image has none), for plans with a fleet."""
    packed = wheels / "etcd.xz"
    if not packed.is_file():
        return None
    binary = bin_dir / "etcd"
    if not binary.is_file():
        bin_dir.mkdir(parents=True, exist_ok=True)
        binary.write_bytes(lzma.decompress(packed.read_bytes()))
        binary.chmod(0o755)
    return binary


def gpu_names() -> tuple[str, ...]:
    return _gpus("name")


def gpu_uuids() -> tuple[str, ...]:
    return _gpus("uuid")


def _gpus(field: str) -> tuple[str, ...]:
    """One nvidia-smi field of each GPU, in NVML's order; none where nvidia-smi is not."""
    if shutil.which("nvidia-smi") is None:
        return ()
    query = ["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader"]
    listed = subprocess.run(query, capture_output=True, text=True, timeout=60)
    return tuple(line.strip() for line in listed.stdout.splitlines() if line.strip())


def describe_machine(python: str, env: dict[str, str], dry: bool) -> str:
    """The GPUs, their links and the libraries' versions (a dry run skips the libraries: it
    checks the plan, not the machine)."""
    commands = [
        ["nvidia-smi", "--query-gpu=index,name,uuid,driver_version,memory.total",
         "--format=csv,noheader"],
        ["nvidia-smi", "topo", "-m"],
        [python, "-c", "import sys, torch; print('python', sys.version.split()[0], 'torch', "
         "torch.__version__, 'cuda', torch.version.cuda)"],
        [python, "-c", "import transformers, timm; print('transformers', "
         "transformers.__version__, 'timm', timm.__version__)"],
    ][: 2 if dry else None]  # fmt: skip
    lines = [f"cores: {os.cpu_count()}  commit: {_commit()}"]
    for command in commands:
        if shutil.which(command[0]) is None:
            continue
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
        lines.append((done.stdout + done.stderr).strip())
    return "\n".join(lines) + "\n"


def done_cells(folders: Iterable[Path], retry_failed: bool, code: str) -> dict[str, str]:
    """Cells with a stored outcome that a new call does not run again: done ones, and failed
    ones unless asked (a failure that repeats would spend every call's minutes), but only
    those that failed on the same ``code`` (``code_digest``): a fix since gets its run.
    ``folders`` hold cell folders: the results folder here, and earlier calls' on a warm
    machine."""
    found: dict[str, str] = {}
    markers = (marker for folder in folders for marker in sorted(folder.glob("*/cell.json")))
    for marker in markers:
        outcome = json.loads(marker.read_text())
        status = outcome["status"]
        repeats = status == "failed" and not retry_failed and outcome.get("code") == code
        if status == "done" or repeats:
            found[marker.parent.name] = status
    return found


def run_cell(
    cell: Cell, kit: Kit, folder: Path, env: dict[str, str], seconds: float, gpu: str | None = None
) -> dict:
    """One cell as a process group of its own, killed whole at ``seconds``; its output goes to
    ``log.txt`` in its folder and its outcome to ``cell.json``. With ``gpu`` (a UUID) the cell
    sees that GPU alone."""
    folder.mkdir(parents=True, exist_ok=True)
    argv = [part.format(out=folder, python=kit.python) for part in cell.argv]
    began = time.monotonic()
    own = {"KIT_CELL_OUT": str(folder)} | ({"CUDA_VISIBLE_DEVICES": gpu} if gpu else {})
    with open(folder / "log.txt", "wb") as log:
        process = subprocess.Popen(
            argv, cwd=ROOT, env=env | own, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        try:
            rc: int | None = process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            rc = None
            _kill_group(process)
    outcome = {
        "cell": cell.name,
        "status": "cut" if rc is None else ("done" if rc == 0 else "failed"),
        "rc": rc,
        "wall_s": round(time.monotonic() - began, 1),
        "argv": argv,
        "gpus": list(kit.gpus),
        "pinned_to": gpu,
        "commit": _commit(),
        "code": code_digest(),
        "ended": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (folder / "cell.json").write_text(json.dumps(outcome, indent=1) + "\n")
    return outcome


def _kill_group(process: subprocess.Popen) -> None:
    for sig in (signal.SIGINT, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
            process.wait(timeout=10)
            return
        except subprocess.TimeoutExpired:
            continue
        except ProcessLookupError:
            return


def seed_store(kept: Path, store: Path, folders: tuple[str, ...]) -> str:
    """Copy into the machine's ``store`` the files under ``folders`` that the results folder's
    store ``kept`` holds and the machine lacks: a machine given back between two calls loses
    its store, and a fresh one then starts from what the calls before brought back. Copied
    with their times, the files count as there before the call, so they are not packed again."""
    copied = 0
    for folder in folders:
        for source in sorted((kept / folder).rglob("*")) if (kept / folder).is_dir() else []:
            target = store / source.relative_to(kept)
            if source.is_file() and not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target)
                copied += 1
    return f"store: {copied} files of {', '.join(folders)} put in from {kept}"


def listing(store: Path) -> dict[str, tuple[int, int]]:
    """Each file of ``store`` (its path inside) with its size and modification time."""
    if not store.is_dir():
        return {}
    return {
        path.relative_to(store).as_posix(): (stat.st_size, stat.st_mtime_ns)
        for path in store.rglob("*")
        if path.is_file() and (stat := path.stat())
    }


def pack(
    out: Path, cells: Path, store: Path | None, before: dict[str, tuple[int, int]] | None = None
) -> list[Path]:
    """This call's cell folders and what it added to the store or changed there (records,
    sweeps, span archives; not ``before``'s files as they were: earlier calls on this machine
    brought those back, for whichever results folder; the model assets left out: they are
    rebuilt from seeds) as one tar.gz, split into parts under 16 MiB."""
    bundle = out / "results.tar.gz"
    with tarfile.open(bundle, "w:gz", compresslevel=6) as tar:
        if cells.is_dir():
            tar.add(cells, arcname="cells")
        if store is not None and store.is_dir():
            tar.add(store, arcname="store", filter=partial(_new_results, store, before or {}))
    room = MAX_FILES - sum(1 for p in out.iterdir() if p.is_file() and p != bundle)
    size = bundle.stat().st_size
    if size <= PART_BYTES:
        return [bundle]
    count = -(-size // PART_BYTES)
    if count > room:
        raise SystemExit(f"gpu_kit: results of {size / 2**20:.0f} MiB need {count} files; "
                         f"{room} are left of the {MAX_FILES} that come back")  # fmt: skip
    parts = []
    with open(bundle, "rb") as whole:
        for index in range(count):
            part = out / f"results.tar.gz.{index:02d}"
            part.write_bytes(whole.read(PART_BYTES))
            parts.append(part)
    bundle.unlink()
    return parts


def _new_results(
    store: Path, before: dict[str, tuple[int, int]], info: tarfile.TarInfo
) -> tarfile.TarInfo | None:
    """``info`` unless it is a model asset, a lock, or a file as ``before`` listed it (the
    file's own modification time: a TarInfo keeps whole seconds only)."""
    parts = Path(info.name).parts
    if len(parts) > 1 and parts[1] in ("models", "locks"):
        return None
    if info.isfile():
        inside = "/".join(parts[1:])
        stat = (store / inside).stat()
        if before.get(inside) == (stat.st_size, stat.st_mtime_ns):
            return None
    return info


def _wheel_list() -> list[tuple[set[str], str]]:
    """benchmarks/gpu_wheels.txt's lines: each pin's groups and its ``name==version``."""
    fields = (line.split("#")[0].split() for line in WHEEL_LIST.read_text().splitlines())
    return [(set(groups.split(",")), pin) for groups, pin in (f for f in fields if len(f) == 2)]


def _pins(groups: set[str]) -> list[str]:
    """The ``name==version`` lines of ``groups`` in benchmarks/gpu_wheels.txt."""
    return [pin for named, pin in _wheel_list() if groups & named]


def _canonical(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


def missing_wheels(plan: Plan, wheels: Path) -> list[str]:
    """The pins of the plan's groups (``base`` and its ``WHEELS``) that ``wheels`` holds no
    wheel of, and ``etcd.xz`` where the plan runs a fleet without it: what a call would fail
    on at a cell's first import, minutes in."""
    held = {_canonical_pin(pin) for pin in _held_pins(wheels)}
    groups = {"base", *plan.wheels}
    missing = [pin for pin in _pins(groups) if _canonical_pin(pin) not in held]
    if "fleet" in groups and not (wheels / "etcd.xz").is_file():
        missing.append("etcd.xz")
    return missing


def _held_pins(wheels: Path) -> list[str]:
    listed = wheels / PINS
    return listed.read_text().split() if listed.is_file() else []


def _canonical_pin(pin: str) -> str:
    name, version = pin.split("==")
    return f"{_canonical(name)}=={version}"


def carried_bytes(folders: list[Path]) -> int:
    """What a device call carries from this checkout: the files git tracks or would add (the
    working tree as the device tool copies it) and the carried ``folders``, each file by the
    disk space it takes, which is what the device tool's limit held to: it refused a call of
    63.7 MiB of bytes (68.1 on disk) and one of 62.1 (64.7 on disk), and took one of 58.9
    (61.6 on disk)."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, capture_output=True,
        check=True,
    ).stdout.decode()  # fmt: skip
    tree = sum(_on_disk(REPO / name) for name in listed.split("\0")
               if name and (REPO / name).is_file())  # fmt: skip
    carried = sum(_on_disk(p) for folder in folders if folder.is_dir()
                  for p in folder.rglob("*") if p.is_file())  # fmt: skip
    return tree + carried


def _on_disk(path: Path) -> int:
    return path.stat().st_blocks * 512


def missing_on_image(plan: Plan) -> tuple[list[str], list[str]]:
    """The distributions installed here that a cell on the GPU image would not find, neither
    on the image nor among the plan's wheels (mlms itself travels with the working tree), and
    the top-level modules they hold. What an image package requires here counts as there: the
    image holds that package at its own version, with its own requirements met (a newer
    huggingface_hub here needs httpx2; the image's needs httpx, which it has)."""
    from importlib import metadata

    floors = _floors()
    image = {_canonical(name) for name, version in _image_versions().items()
             if version >= floors.get(_canonical(name), ())}  # fmt: skip
    installed = {_canonical(d.metadata["Name"]): d for d in metadata.distributions() if d.metadata}
    there = image | {_canonical(pin.split("==")[0]) for pin in _pins({"base", *plan.wheels})}
    there.add("mlms")
    todo = [name for name in image if name in installed]
    while todo:
        for requirement in installed[todo.pop()].requires or []:
            if "extra ==" in requirement:
                continue
            name = _canonical(re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement).group(0))
            if name not in there:
                there.add(name)
                if name in installed:
                    todo.append(name)
    modules = sorted(
        module
        for module, distributions in metadata.packages_distributions().items()
        if not any(_canonical(d) in there for d in distributions)
    )
    return modules, sorted(set(installed) - there)


def _image_versions() -> dict[str, tuple[int, ...]]:
    lines = [line for line in IMAGE_LIST.read_text().splitlines() if not line.startswith("#")]
    pairs = (line.split("==", 1) for line in lines if "==" in line)
    return {name.strip(): _release(version) for name, version in pairs}


def _floors() -> dict[str, tuple[int, ...]]:
    """mlms's lowest versions (``name>=X`` in pyproject.toml, extras too): a package the image
    holds below its floor counts as missing there (its grpcio is older than the generated
    code)."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text()).get("project", {})
    requirements = [*project.get("dependencies", [])]
    for extra in project.get("optional-dependencies", {}).values():
        requirements += extra
    floors = {}
    for requirement in requirements:
        found = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)[^;]*?>=\s*([0-9][0-9.]*)", requirement)
        if found:
            floors[_canonical(found.group(1))] = _release(found.group(2))
    return floors


def _release(version: str) -> tuple[int, ...]:
    """A version's leading numbers (``1.84.0`` -> (1, 84, 0)), enough to compare to a floor."""
    return tuple(int(part) for part in re.findall(r"\d+", version.split("+")[0])[:3])


#: A dry run's ``sitecustomize``: every process of a cell hides what the image lacks, as
#: modules and as installed distributions (a library may probe either: torch asks
#: ``importlib.metadata`` for optree's version before importing it). The finders that were there
#: are wrapped rather than preceded by one that raises, so that a probe finds nothing, as it
#: would there, instead of failing.
_HIDE = """import re
import sys

MODULES = frozenset({modules!r})
DISTRIBUTIONS = frozenset({distributions!r})


class NotOnTheGpuImage:
    def __init__(self, finder):
        self.finder = finder

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in MODULES:
            return None
        return self.finder.find_spec(name, path, target)

    def find_distributions(self, *args, **kwargs):
        found = getattr(self.finder, "find_distributions", None)
        for distribution in found(*args, **kwargs) if found else ():
            name = re.sub(r"[-_.]+", "-", distribution.metadata["Name"] or "").lower()
            if name not in DISTRIBUTIONS:
                yield distribution

    def __getattr__(self, name):
        return getattr(self.finder, name)


sys.meta_path[:] = [NotOnTheGpuImage(finder) for finder in sys.meta_path]
"""


def emulate_image(plan: Plan, folder: Path) -> str:
    """A ``sitecustomize`` in ``folder`` (put first on the cells' PYTHONPATH) that hides what
    the GPU image lacks; a note naming it."""
    modules, distributions = missing_on_image(plan)
    folder.mkdir(parents=True, exist_ok=True)
    text = _HIDE.format(modules=modules, distributions=distributions)
    (folder / "sitecustomize.py").write_text(text)
    shown = ", ".join(distributions[:8]) + (", ..." if len(distributions) > 8 else "")
    return f"dry: the GPU image's packages ({len(distributions)} distributions hidden: {shown})"


def run(args: argparse.Namespace) -> int:
    began = time.monotonic()
    plan = with_groups(load_plan(args.plan), args.groups)
    if args.one_gpu_each and plan.gpus_per_cell > 1:
        raise SystemExit(f"gpu_kit: --one-gpu-each runs each cell on one GPU, but plan "
                         f"{plan.name}'s cells use {plan.gpus_per_cell} GPUs each")  # fmt: skip
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ) | GPU_ENV
    if args.dry:
        kit = Kit(dry=True, python=sys.executable, gpus=())
        machine = Path(args.machine or f"{MACHINE}-dry")
        image = machine / "image"
        notes = ["dry: the CPU, no wheels", emulate_image(plan, image)]
        env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(image), str(ROOT), env.get("PYTHONPATH")])
        )
    else:
        gpus = gpu_names()
        if not gpus:
            raise SystemExit("gpu_kit: no GPU here (nvidia-smi lists none); --dry runs on the CPU")
        missing = missing_wheels(plan, WHEELS)
        if missing:
            raise SystemExit(
                f"gpu_kit: {WHEELS.name}/ lacks what plan {plan.name} needs: "
                f"{', '.join(missing)}; run `gpu_kit.py wheels {plan.name}` and carry it"
            )
        kit = Kit(dry=False, python=sys.executable, gpus=gpus)
        machine = Path(args.machine or MACHINE)
        notes = [install_wheels(WHEELS, machine / "site")]
        env["PYTHONPATH"] = os.pathsep.join([str(machine / "site"), str(ROOT)])
        etcd = unpack_etcd(WHEELS, machine / "bin")
        if etcd is not None:
            env["MLMS_ETCD_BIN"] = str(etcd)
            notes.append(f"etcd: {etcd}")
    home = machine / "home"
    env["MLMS_HOME"] = str(home)
    # A plan may import mlms to list its cells: the kit then sees what the cells see.
    os.environ.update(env)
    sys.path[:0] = env["PYTHONPATH"].split(os.pathsep)
    # A dry run resumes within its own machine folder, a folder per plan: it never marks the
    # real plan's cells done, nor another plan's cells of the same name.
    dry_results = machine / "resume" / plan.name
    results = Path(args.results or (dry_results if kit.dry else RESULTS / plan.results))
    kit = dataclasses.replace(kit, results=results)
    if plan.store_carried:
        notes.append(seed_store(results / "store", home / "store", plan.store_carried))
    (out / "env.txt").write_text(
        f"plan {plan.name}: results {results}\n" + "\n".join(notes) + "\n"
        + describe_machine(kit.python, env, kit.dry)
    )  # fmt: skip
    print((out / "env.txt").read_text(), end="", flush=True)

    cells = plan.cells(kit)
    if args.only:
        wanted = set(args.only.split(","))
        unknown = wanted - {c.name for c in cells}
        if unknown:
            raise SystemExit(f"gpu_kit: no cells {sorted(unknown)} in plan {plan.name}: "
                             f"expected some of {[c.name for c in cells]}")  # fmt: skip
        cells = [c for c in cells if c.name in wanted]
    calls = machine / "calls"
    code = code_digest()
    here = done_cells(sorted(calls.glob("*")), args.retry_failed, code)
    recorded = done_cells([results / "cells"], args.retry_failed, code) | here
    skipped = {c.name: recorded[c.name] for c in cells
               if c.name in (here if c.on_machine else recorded)}  # fmt: skip
    store_before = listing(home / "store")
    fresh = calls / time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    # One cell at a time seeing every GPU; or, asked, one cell on each GPU at once.
    slots: tuple[str | None, ...] = (None,)
    if args.one_gpu_each:
        slots = (None, None) if kit.dry else gpu_uuids()
        print(f"one cell on each of {len(slots)} {'slots' if kit.dry else 'GPUs'}", flush=True)
    free: queue.Queue[str | None] = queue.Queue()
    for slot in slots:
        free.put(slot)

    def one(cell: Cell) -> dict:
        if cell.name in skipped:
            return {"cell": cell.name, "status": f"{skipped[cell.name]} before"}
        gpu = free.get()
        try:
            left = args.budget - (time.monotonic() - began) - PACK_RESERVE_S
            if left < cell.min_s:
                return {"cell": cell.name, "status": "left for the next call"}
            seconds = min(cell.timeout_s, left)
            where = f" on {gpu}" if gpu else ""
            print(f"cell {cell.name}: up to {seconds:.0f} s{where}", flush=True)
            outcome = run_cell(cell, kit, fresh / cell.name, env, seconds, gpu)
        finally:
            free.put(gpu)
        ended = f"cell {cell.name}: {outcome['status']} in {outcome['wall_s']} s"
        if outcome["status"] != "done":
            ended += "\n" + _tail(fresh / cell.name / "log.txt")
        print(ended, flush=True)
        return outcome

    # Cells start in the plan's order as slots come free, a cell marked alone once the cells
    # before it have ended and before any after it; the table keeps the plan's order.
    outcomes: list[dict] = []
    with concurrent.futures.ThreadPoolExecutor(len(slots)) as pool:
        for alone, grouped in itertools.groupby(cells, key=lambda c: c.alone):
            group = list(grouped)
            outcomes += [one(c) for c in group] if alone else list(pool.map(one, group))

    table = _outcome_table(outcomes)
    left = sum(1 for o in outcomes if o["status"] in ("cut", "left for the next call"))
    table += f"\n{left} cells left: the same command resumes them\n" if left else ""
    (out / "summary.txt").write_text(table)
    files = pack(out, fresh, home / "store", store_before)
    print(table + f"packed: {', '.join(p.name for p in files)}; the call took "
          f"{time.monotonic() - began:.0f} s", flush=True)  # fmt: skip
    return 1 if any(o["status"] == "failed" for o in outcomes) else 0


def _outcome_table(outcomes: Iterable[dict]) -> str:
    lines = ["| cell | status | wall (s) |", "|---|---|---:|"]
    lines += [f"| {o['cell']} | {o['status']} | {o.get('wall_s', '')} |" for o in outcomes]
    return "\n".join(lines) + "\n"


def _tail(path: Path, lines: int = 25) -> str:
    text = path.read_text(errors="replace").splitlines() if path.is_file() else []
    return "\n".join(text[-lines:])


#: What the code digest covers: the code a cell runs, its tests and what the kit reads.
CODE_DIRS = ("mlms", "benchmarks", "tests")
CODE_SUFFIXES = (".py", ".proto", ".txt", ".toml")
#: Commits back from HEAD that ``unpack`` searches for a cell's code digest.
CODE_SEARCH = 400


def _is_code(path: str) -> bool:
    parts = path.split("/")
    return (
        (parts[0] in CODE_DIRS or path == "pyproject.toml")
        and path.endswith(CODE_SUFFIXES)
        and not path.startswith("benchmarks/results/")
        and "__pycache__" not in parts
    )


def _digest(blobs: Iterable[tuple[str, str]]) -> str:
    """12 hex digits over (path, git blob id) pairs of the code files, in path order."""
    lines = "".join(f"{path} {blob}\n" for path, blob in sorted(blobs) if _is_code(path))
    return hashlib.sha256(lines.encode()).hexdigest()[:12]


def code_digest(root: Path = ROOT) -> str:
    """The digest of the code files under ``root`` as they are, read as git would hash them
    (a blob id each), so that a commit's tree gives the same digest without a checkout: the
    lent machine's copy may carry an older .git than its files, and this names the code
    that ran whatever its .git says."""
    paths = [root / "pyproject.toml"]
    for top in CODE_DIRS:
        for folder, dirs, files in os.walk(root / top):
            skipped = {"__pycache__"} | (
                {"results"} if Path(folder) == root / "benchmarks" else set()
            )
            dirs[:] = [d for d in dirs if d not in skipped]
            paths += [Path(folder) / name for name in files]
    blobs = []
    for path in paths:
        relative = path.relative_to(root).as_posix()
        if path.is_file() and not path.is_symlink() and _is_code(relative):
            data = path.read_bytes()
            blob = hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False)
            blobs.append((relative, blob.hexdigest()))
    return _digest(blobs)


@lru_cache
def commit_of_code(digest: str, repo: Path = REPO) -> str | None:
    """The newest of the last ``CODE_SEARCH`` commits of ``repo`` whose code has ``digest``
    (asked once per digest: the cells of one call share theirs)."""
    listed = subprocess.run(["git", "rev-list", f"--max-count={CODE_SEARCH}", "HEAD"], cwd=repo,
                            capture_output=True, text=True)  # fmt: skip
    for commit in listed.stdout.split():
        tree = subprocess.run(
            ["git", "ls-tree", "-r", commit, "--", *CODE_DIRS, "pyproject.toml"],
            cwd=repo, capture_output=True, text=True,
        )  # fmt: skip
        blobs = []
        for line in tree.stdout.splitlines():
            meta, path = line.split("\t", 1)
            blobs.append((path, meta.split()[2]))
        if _digest(blobs) == digest:
            return commit[:7]
    return None


def _commit() -> str:
    if SNAPSHOT.is_file():
        return SNAPSHOT.read_text().strip()
    # A lent machine's copy of the repository may carry an older .git than its files: a tree
    # that differs from its commit says so (a snapshot is the way to measure one commit).
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                          capture_output=True, text=True)  # fmt: skip
    changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                             capture_output=True, text=True)  # fmt: skip
    commit = done.stdout.strip() or "unknown"
    return f"{commit} with changes" if changed.stdout.strip() else commit


# --- here: unpack, summary, wheels ------------------------------------------------------------


def unpack(args: argparse.Namespace) -> int:
    """Merge what a call brought back into the results folder: each cell's folder replaces an
    earlier one of the same name; the store's files are added; env.txt and summary.txt are kept
    per call under ``calls/``."""
    back = Path(args.files_at)
    env_file = back / "env.txt"
    if not env_file.is_file():
        raise SystemExit(f"gpu_kit: {back} has no env.txt: expected the files of a kit call")
    # The first line names the results folder as the machine saw it; here it is the same name.
    first = env_file.read_text().splitlines()[0]
    into = Path(args.into) if args.into else RESULTS / Path(first.split("results ", 1)[1]).name
    parts = sorted(back.glob("results.tar.gz*"))
    if not parts:
        raise SystemExit(f"gpu_kit: {back} has no results.tar.gz: the call packed nothing")
    into.mkdir(parents=True, exist_ok=True)
    staging = into / ".unpacking"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    joined = staging / "results.tar.gz"
    with open(joined, "wb") as whole:
        for part in parts:
            whole.write(part.read_bytes())
    with tarfile.open(joined) as tar:
        tar.extractall(staging, filter="data")
    for cell in sorted((staging / "cells").glob("*")):
        _name_the_commit(cell / "cell.json")
        target = into / "cells" / cell.name
        shutil.rmtree(target, ignore_errors=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(cell, target)
    if (staging / "store").is_dir():
        shutil.copytree(staging / "store", into / "store", dirs_exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    # Two calls unpacked within a second keep a folder each.
    taken = {p.name for p in (into / "calls").glob(f"{stamp}*")}
    call = into / "calls" / next(f"{stamp}{suffix}" for suffix in _suffixes() if
                                 f"{stamp}{suffix}" not in taken)  # fmt: skip
    call.mkdir(parents=True)
    for name in ("env.txt", "summary.txt"):
        if (back / name).is_file():
            shutil.copy(back / name, call / name)
    shutil.rmtree(staging)
    print(f"unpacked into {into}")
    print((back / "summary.txt").read_text() if (back / "summary.txt").is_file() else "")
    return 0


def _name_the_commit(outcome_file: Path) -> None:
    """Add to a cell's outcome the commit whose code it ran (its ``code`` digest), or say that
    none of the recent ones has it."""
    if not outcome_file.is_file():
        return
    outcome = json.loads(outcome_file.read_text())
    if "code" not in outcome:
        return
    found = commit_of_code(outcome["code"])
    outcome["code_commit"] = found
    outcome_file.write_text(json.dumps(outcome, indent=1) + "\n")
    ran = f"commit {found}" if found else "code of no recent commit (uncommitted changes)"
    print(f"cell {outcome['cell']}: code {outcome['code']}, {ran}")


def _suffixes() -> Iterable[str]:
    yield ""
    yield from (f"-{n}" for n in itertools.count(2))


def summary(args: argparse.Namespace) -> int:
    plan = load_plan(args.plan)
    results = Path(args.results) if args.results else RESULTS / plan.results
    if plan.summarize is None:
        raise SystemExit(f"gpu_kit: plan {plan.name} has no summarize()")
    print(plan.summarize(results), end="")
    return 0


def wheels(args: argparse.Namespace) -> int:
    """Download the pinned wheels of the plans' groups (``base`` and their ``WHEELS``) for the GPU
    image's Python (3.12), install them into a site folder here and pack it into .whl-kit/
    (``SITE``, with ``PINS``), and pack this machine's etcd server beside them when the plan
    runs a fleet."""
    import tempfile

    plans = [with_groups(load_plan(name), args.groups) for name in args.plan.split(",")]
    groups = {"base", *(group for plan in plans for group in plan.wheels)}
    pins = _pins(groups)
    shutil.rmtree(WHEELS, ignore_errors=True)
    WHEELS.mkdir()
    target = ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp"]
    for platform in ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64",
                     "manylinux_2_17_x86_64", "manylinux2014_x86_64", "any"):  # fmt: skip
        target += ["--platform", platform]
    pip = [sys.executable, "-m", "pip", "-q"]
    with tempfile.TemporaryDirectory(prefix="gpu-kit-wheels-") as work:
        downloads, site = Path(work) / "downloads", Path(work) / "site"
        subprocess.run([*pip, "download", "-d", str(downloads), "--no-deps", *target, *pins],
                       check=True)  # fmt: skip
        subprocess.run([*pip, "install", "--no-index", "--no-deps", "--no-compile", "--target",
                        str(site), *target, *map(str, sorted(downloads.glob("*.whl")))],
                       check=True)  # fmt: skip
        wheel_bytes = sum(p.stat().st_size for p in downloads.glob("*.whl"))
        with tarfile.open(WHEELS / SITE, "w:xz", preset=9) as tar:
            tar.add(site, arcname=".")
    (WHEELS / PINS).write_text("\n".join(pins) + "\n")
    etcd = shutil.which("etcd")
    if "fleet" in groups:
        if etcd is None:
            raise SystemExit("gpu_kit: plan runs a fleet but this machine has no etcd to carry")
        (WHEELS / "etcd.xz").write_bytes(lzma.compress(Path(etcd).read_bytes(), preset=9))
    total = sum(p.stat().st_size for p in WHEELS.iterdir())
    print(f"{WHEELS}: {len(pins)} wheels ({wheel_bytes / 2**20:.1f} MiB) packed with the rest "
          f"into {total / 2**20:.1f} MiB (groups: {', '.join(sorted(groups))})")  # fmt: skip
    return 0


def check(args: argparse.Namespace) -> int:
    """Before a device call: whether .whl-kit/ holds the plan's wheels, and whether the
    working tree with .whl-kit/ and .kit-src/ fits in what one call carries."""
    size = carried_bytes([WHEELS, SNAPSHOT_DIR])
    print(f"carried: {size / 2**20:.1f} MiB of {CARRY_LIMIT / 2**20:.0f} (the working tree, "
          f"{WHEELS.name}/, {SNAPSHOT_DIR.name}/)")  # fmt: skip
    missing = False
    for plan in (with_groups(load_plan(name), args.groups) for name in args.plan.split(",")):
        lacking = missing_wheels(plan, WHEELS)
        if lacking:
            missing = True
            print(f"{WHEELS.name}/ lacks what plan {plan.name} needs: {', '.join(lacking)}; "
                  f"run `gpu_kit.py wheels {args.plan}` with the same --groups")  # fmt: skip
    if size > CARRY_LIMIT:
        print(
            "too large to carry: drop a wheel group the cells of this call do not import, or "
            "park results that no cell of this call reads outside the checkout for the call "
            "(the device tool copies the working tree as it is; move them back after it):"
        )
        plans = {load_plan(name).results for name in args.plan.split(",")}
        for folder, held in to_park(plans, size - CARRY_LIMIT):
            print(f"  mv {folder.relative_to(REPO)} /tmp/   # {held / 2**20:.1f} MiB")
    return 1 if missing or size > CARRY_LIMIT else 0


def to_park(keep: set[str], over: int) -> list[tuple[Path, int]]:
    """The results folders to leave out of a call ``over`` bytes too large to carry: the
    largest of ``parkable`` first, until they free that much."""
    chosen = []
    for folder, held in parkable(keep):
        if over <= 0:
            break
        chosen.append((folder, held))
        over -= held
    return chosen


def parkable(keep: set[str]) -> list[tuple[Path, int]]:
    """The results folders other than ``keep`` (plans' RESULTS), largest first, with the disk
    space their files take."""
    sizes = [
        (folder, sum(_on_disk(p) for p in folder.rglob("*") if p.is_file()))
        for folder in sorted(RESULTS.iterdir())
        if folder.is_dir() and folder.name not in keep
    ]
    return sorted(sizes, key=lambda pair: -pair[1])


def snapshot(args: argparse.Namespace) -> int:
    """One commit's code (mlms/, benchmarks/ without its results, tests/) in .kit-src/, to carry
    and run there: a GPU call then measures that commit, whatever the working tree holds."""
    if SNAPSHOT.is_file():
        raise SystemExit("gpu_kit: snapshot from the repository, not from a snapshot")
    commit = subprocess.run(["git", "rev-parse", "--short", args.commit], cwd=ROOT,
                            capture_output=True, text=True)  # fmt: skip
    if commit.returncode != 0:
        raise SystemExit(f"gpu_kit: no commit {args.commit!r} in this repository")
    shutil.rmtree(SNAPSHOT_DIR, ignore_errors=True)
    SNAPSHOT_DIR.mkdir()
    archive = subprocess.run(
        ["git", "archive", "--format=tar", args.commit, "mlms", "benchmarks", "tests",
         "pyproject.toml"], cwd=ROOT, capture_output=True, check=True,
    )  # fmt: skip
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        members = [m for m in tar.getmembers() if not m.name.startswith("benchmarks/results/")]
        tar.extractall(SNAPSHOT_DIR, members=members, filter="data")
    (SNAPSHOT_DIR / "KIT_SNAPSHOT").write_text(commit.stdout.strip() + "\n")
    size = sum(p.stat().st_size for p in SNAPSHOT_DIR.rglob("*") if p.is_file())
    print(f"{SNAPSHOT_DIR}: commit {commit.stdout.strip()}, {size / 2**20:.1f} MiB")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    verbs = parser.add_subparsers(dest="verb", required=True)
    running = verbs.add_parser("run", help="run a plan's cells within a budget")
    running.add_argument("plan", help="a plan in benchmarks/plans/ or a .py file")
    running.add_argument("out", help="the folder whose files come back ($OUT)")
    running.add_argument("--dry", action="store_true", help="the same plan, small, on the CPU")
    running.add_argument("--budget", type=float, default=540.0, help="seconds for the whole call")
    running.add_argument("--only", default=None, help="these cells only (comma-separated)")
    running.add_argument("--results", default=None, help="the results folder that resumes")
    running.add_argument("--retry-failed", action="store_true", help="run failed cells again")
    running.add_argument("--machine", default=None, help=f"the kit's own folder ({MACHINE})")
    running.add_argument(
        "--one-gpu-each",
        action="store_true",
        help="cells side by side, each seeing one GPU (CUDA_VISIBLE_DEVICES; --dry: 2 at once); "
        "for plans whose cells need one GPU each and nothing of each other",
    )
    unpacking = verbs.add_parser("unpack", help="merge a call's files into its results folder")
    unpacking.add_argument("files_at")
    unpacking.add_argument("--into", default=None)
    summing = verbs.add_parser("summary", help="print a plan's tables from its results folder")
    summing.add_argument("plan")
    summing.add_argument("--results", default=None)
    getting = verbs.add_parser("wheels", help="download a plan's .whl-kit/ for the GPU image")
    getting.add_argument("plan", help="a plan, or several comma-separated: one kit for them all")
    snapping = verbs.add_parser("snapshot", help="one commit's code in .kit-src/ to carry")
    snapping.add_argument("commit", nargs="?", default="HEAD")
    checking = verbs.add_parser("check", help="before a call: the plan's wheels, the carry size")
    checking.add_argument("plan", help="a plan, or several comma-separated")
    groups_help = (
        "these wheel groups of benchmarks/gpu_wheels.txt instead of the plan's WHEELS "
        "(comma-separated; base: none beyond it), for a call whose cells need less"
    )
    for verb in (running, getting, checking):
        verb.add_argument("--groups", default=None, help=groups_help)
    args = parser.parse_args()
    verbs_run = {"run": run, "unpack": unpack, "summary": summary, "wheels": wheels,
                 "snapshot": snapshot, "check": check}  # fmt: skip
    verb = verbs_run[args.verb]
    return verb(args)


if __name__ == "__main__":
    sys.exit(main())

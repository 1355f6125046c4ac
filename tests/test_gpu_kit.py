"""The GPU run kit (``benchmarks/gpu_kit.py``) in its dry mode on the CPU, run as a user runs it:
a plan's cells within a budget, resumed on the next call, packed into the files that come back
from a lent GPU machine and merged here; wheels installed once per machine; a snapshot of one
commit that runs with the repository's results. The real plans are checked to list their cells.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from importlib import metadata
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
KIT = ROOT / "benchmarks" / "gpu_kit.py"

TINY_PLAN = """
from benchmarks.gpu_kit import Cell

RESULTS = "tiny"

def cells(kit):
    write = "import os, pathlib; pathlib.Path(os.environ['KIT_CELL_OUT'], 'x.txt').write_text('{}')"
    return [
        Cell("first", ("{python}", "-c", write.format("one")), min_s=0),
        Cell("broken", ("{python}", "-c", "raise SystemExit('no good')"), min_s=0),
        Cell("big", ("{python}", "-c",
                     "import os; open(os.environ['KIT_CELL_OUT'] + '/noise', 'wb')"
                     ".write(os.urandom(int(os.environ.get('KIT_BIG', '0'))))"), min_s=0),
        Cell("last", ("{python}", "-c", write.format("last")), min_s=0),
        Cell("slow", ("{python}", "-c", "import time; time.sleep(60)"), timeout_s=2, min_s=10),
    ]

def summarize(results):
    return "".join(sorted(p.parent.name + " " for p in results.glob("cells/*/x.txt"))) + "\\n"
"""


def kit_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_kit_under_test", KIT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def kit(*args: str, kit_path: Path = KIT, env: dict[str, str] | None = None, cwd: Path = ROOT):
    return subprocess.run(
        [sys.executable, str(kit_path), *args],
        capture_output=True, text=True, timeout=300, env=env, cwd=cwd,
    )  # fmt: skip


def test_budget_resume_pack_and_unpack(tmp_path: Path) -> None:
    plan = tmp_path / "tiny.py"
    plan.write_text(TINY_PLAN)
    results, machine, out = tmp_path / "results", tmp_path / "machine", tmp_path / "out"
    common = ["--dry", "--machine", str(machine), "--results", str(results)]
    # "slow" outlasts its own 2 s limit: cut, to be run again.
    first = kit("run", str(plan), str(out), *common)
    assert first.returncode == 1, first.stderr  # "broken" failed
    states = {p.name: json.loads((p / "cell.json").read_text())["status"]
              for p in machine.glob("calls/*/*")}  # fmt: skip
    assert states == {"first": "done", "slow": "cut", "broken": "failed", "big": "done",
                      "last": "done"}  # fmt: skip
    assert "1 cells left: the same command resumes them" in first.stdout
    assert "no good" in first.stdout  # a failed cell's log tail is shown
    back = sorted(p.name for p in out.iterdir())
    assert back == ["env.txt", "results.tar.gz", "summary.txt"]

    unpacked = kit("unpack", str(out), "--into", str(results))
    assert unpacked.returncode == 0, unpacked.stderr
    assert (results / "cells" / "first" / "x.txt").read_text() == "one"
    assert len(list((results / "calls").glob("*/summary.txt"))) == 1

    # A fresh machine: only what the results folder says is done or failed is skipped.
    shutil.rmtree(machine)
    # 30 s of budget less the kit's 25 s reserve for packing leave "slow" less than its 10 s.
    second = kit("run", str(plan), str(tmp_path / "out2"), "--budget", "30", *common)
    summary = (tmp_path / "out2" / "summary.txt").read_text()
    assert "| first | done before |" in summary
    assert "| broken | failed before |" in summary
    assert "| slow | left for the next call |" in summary and second.returncode == 0
    retried = kit("run", str(plan), str(tmp_path / "out3"), "--budget", "40", "--retry-failed",
                  "--only", "broken", *common)  # fmt: skip
    assert retried.returncode == 1 and "| broken | failed |" in retried.stdout
    # A cell that failed on other code than this runs again unasked: a fix may have come since.
    shutil.rmtree(machine)
    marker = results / "cells" / "broken" / "cell.json"
    marker.write_text(json.dumps(json.loads(marker.read_text()) | {"code": "0" * 12}))
    fixed = kit("run", str(plan), str(tmp_path / "out4"), "--budget", "40", "--only", "broken",
                *common)  # fmt: skip
    assert fixed.returncode == 1 and "| broken | failed |" in fixed.stdout

    printed = kit("summary", str(plan), "--results", str(results))
    assert printed.stdout.split() == ["first", "last"]


def test_large_results_come_back_in_parts_and_join(tmp_path: Path) -> None:
    plan = tmp_path / "tiny.py"
    plan.write_text(TINY_PLAN)
    out, results = tmp_path / "out", tmp_path / "results"
    env = dict(os.environ, KIT_BIG=str(20 * 2**20))  # incompressible: 2 parts
    done = kit("run", str(plan), str(out), "--dry", "--machine", str(tmp_path / "m"),
               "--results", str(results), "--only", "big", env=env)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    files = sorted(p for p in out.iterdir())
    assert [p.name for p in files] == ["env.txt", "results.tar.gz.00", "results.tar.gz.01",
                                       "summary.txt"]  # fmt: skip
    assert all(p.stat().st_size <= 16 * 2**20 for p in files)
    assert kit("unpack", str(out), "--into", str(results)).returncode == 0
    assert (results / "cells" / "big" / "noise").stat().st_size == 20 * 2**20


STORE_PLAN = """
from benchmarks.gpu_kit import Cell

RESULTS = "stored"

def cells(kit):
    # Each cell writes a record of its own into the machine's store and rewrites the sweep.
    record = ("import os, pathlib; store = pathlib.Path(os.environ['MLMS_HOME'], 'store'); "
              "(store / 'evaluations').mkdir(parents=True, exist_ok=True); "
              "(store / 'evaluations' / '{name}.json').write_text('{name}'); "
              "(store / 'sweeps').mkdir(exist_ok=True); "
              "(store / 'sweeps' / 's.json').write_text('{name}')")
    build = ("import os, pathlib; models = pathlib.Path(os.environ['MLMS_HOME'], 'store', "
             "'models'); models.mkdir(parents=True, exist_ok=True); "
             "(models / 'weights').write_text('w')")
    return [Cell("assets", ("{python}", "-c", build), min_s=0, on_machine=True),
            *(Cell(name, ("{python}", "-c", record.format(name=name)), min_s=0)
              for name in ("a", "b"))]
"""


def _packed(out: Path) -> list[str]:
    with tarfile.open(out / "results.tar.gz") as tar:
        return sorted(m.name for m in tar.getmembers() if m.isfile())


def test_a_call_packs_only_what_it_added_to_the_store(tmp_path: Path) -> None:
    """Two calls on one machine, the second with a results folder of its own: the second
    brings back its own record and the sweep it rewrote, not the first call's record, nor the
    model assets."""
    plan = tmp_path / "stored.py"
    plan.write_text(STORE_PLAN)
    machine = ["--dry", "--machine", str(tmp_path / "machine")]
    first = kit("run", str(plan), str(tmp_path / "out1"), *machine,
                "--results", str(tmp_path / "r1"), "--only", "assets,a")  # fmt: skip
    assert first.returncode == 0, first.stdout + first.stderr
    assert [n for n in _packed(tmp_path / "out1") if n.startswith("store/")] == [
        "store/evaluations/a.json", "store/sweeps/s.json"]  # fmt: skip
    second = kit("run", str(plan), str(tmp_path / "out2"), *machine,
                 "--results", str(tmp_path / "r2"), "--only", "b")  # fmt: skip
    assert second.returncode == 0, second.stdout + second.stderr
    assert [n for n in _packed(tmp_path / "out2") if n.startswith("store/")] == [
        "store/evaluations/b.json", "store/sweeps/s.json"]  # fmt: skip


def test_a_cell_kept_on_the_machine_runs_again_on_a_fresh_one(tmp_path: Path) -> None:
    """The results folder says the assets are built, but they were built on another machine:
    a fresh machine builds them again, while the measuring cells done stay done; the same
    machine's next call skips them."""
    plan = tmp_path / "stored.py"
    plan.write_text(STORE_PLAN)
    results = tmp_path / "results"

    def call(machine: str, out: str) -> str:
        done = kit("run", str(plan), str(tmp_path / out), "--dry", "--machine",
                   str(tmp_path / machine), "--results", str(results))  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        assert kit("unpack", str(tmp_path / out), "--into", str(results)).returncode == 0
        return (tmp_path / out / "summary.txt").read_text()

    assert "| assets | done |" in call("m1", "out1")
    fresh = call("m2", "out2")
    assert "| assets | done |" in fresh
    assert "| a | done before |" in fresh and "| b | done before |" in fresh
    assert (tmp_path / "m2" / "home" / "store" / "models" / "weights").is_file()
    assert "| assets | done before |" in call("m2", "out3")


def test_a_fresh_machine_starts_from_the_store_folders_the_plan_carries(tmp_path: Path) -> None:
    """The plan carries the records' folder: a call on a fresh machine finds there the record
    an earlier call on another machine brought back, and does not bring it back again; the
    sweeps, not carried, stay behind."""
    plan = tmp_path / "stored.py"
    plan.write_text(STORE_PLAN + 'STORE_CARRIED = ("evaluations/",)\n')
    results = tmp_path / "results"
    for machine, out, cell in (("m1", "out1", "a"), ("m2", "out2", "b")):
        done = kit("run", str(plan), str(tmp_path / out), "--dry", "--machine",
                   str(tmp_path / machine), "--results", str(results), "--only", cell)  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        assert kit("unpack", str(tmp_path / out), "--into", str(results)).returncode == 0
    fresh = tmp_path / "m2" / "home" / "store"
    assert (fresh / "evaluations" / "a.json").read_text() == "a"
    assert (fresh / "sweeps" / "s.json").read_text() == "b"  # its own, not the first call's
    assert "store: 1 files of evaluations/ put in" in (tmp_path / "out2" / "env.txt").read_text()
    assert [n for n in _packed(tmp_path / "out2") if n.startswith("store/")] == [
        "store/evaluations/b.json", "store/sweeps/s.json"]  # fmt: skip


def test_calls_unpacked_within_a_second_keep_a_folder_each(tmp_path: Path) -> None:
    plan = tmp_path / "stored.py"
    plan.write_text(STORE_PLAN)
    out, results = tmp_path / "out", tmp_path / "results"
    done = kit("run", str(plan), str(out), "--dry", "--machine", str(tmp_path / "m"),
               "--results", str(results), "--only", "a")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    for _ in range(3):
        assert kit("unpack", str(out), "--into", str(results)).returncode == 0
    assert len(list((results / "calls").glob("*/summary.txt"))) == 3


MEETING_PLAN = """
from benchmarks.gpu_kit import Cell

RESULTS = "meeting"

def cells(kit):
    # Each cell says it started and waits for the other to say so: only cells that run at
    # the same time both end (one after the other, the first would be cut at its limit).
    meet = ("import os, pathlib, time; here = pathlib.Path(os.environ['KIT_MEET']); "
            "(here / '{me}').touch(); end = time.monotonic() + float(os.environ['KIT_MEET_S']); "
            "wait = lambda: not (here / '{other}').exists() and time.monotonic() < end; "
            "[time.sleep(0.05) for _ in iter(wait, False)]; "
            "raise SystemExit(0 if (here / '{other}').exists() else 'alone')")
    # "x" may run beside no other cell: it fails if "y", next in the plan, starts beside it.
    touch = "import os, pathlib; (pathlib.Path(os.environ['KIT_MEET']) / 'y').touch()"
    alone = ("import os, pathlib, time; here = pathlib.Path(os.environ['KIT_MEET']); "
             "time.sleep(2); raise SystemExit('y beside x' if (here / 'y').exists() else 0)")
    return [*(Cell(me, ("{python}", "-c", meet.format(me=me, other=other)), timeout_s=90,
                   min_s=0) for me, other in (("a", "b"), ("b", "a"))),
            Cell("x", ("{python}", "-c", alone), min_s=0, alone=True),
            Cell("y", ("{python}", "-c", touch), min_s=0)]
"""


def test_one_gpu_each_runs_cells_side_by_side(tmp_path: Path) -> None:
    """Two cells that can only end together: with ``--one-gpu-each`` both end (the dry run's
    two slots stand in for two GPUs, which CI lacks); without it the first waits alone. A cell
    marked alone runs beside none, side by side or not."""
    plan = tmp_path / "meeting.py"
    plan.write_text(MEETING_PLAN)
    # Side by side the other cell starts within a second; one after the other it never does.
    for flag, expected, wait_s in ((["--one-gpu-each"], "done", 60), ([], "failed", 2)):
        name = "side" if flag else "alone"
        meet = tmp_path / name / "meet"
        meet.mkdir(parents=True)
        env = dict(os.environ, KIT_MEET=str(meet), KIT_MEET_S=str(wait_s))
        folders = ["--machine", str(tmp_path / name / "m"), "--results", str(tmp_path / name / "r")]
        run = kit("run", str(plan), str(tmp_path / name / "out"), "--dry", *flag, *folders, env=env)
        summary = (tmp_path / name / "out" / "summary.txt").read_text()
        assert f"| a | {expected} |" in summary and "| b | done |" in summary, run.stdout
        assert "| x | done |" in summary and "| y | done |" in summary, run.stdout
        assert ("one cell on each of 2 slots" in run.stdout) == bool(flag)
    # A plan whose cells split a model across GPUs is refused in one line.
    refused = kit("run", "tensor_parallel", str(tmp_path / "tp"), "--dry", "--one-gpu-each")
    assert refused.returncode != 0 and refused.stderr.strip().splitlines() == [
        "gpu_kit: --one-gpu-each runs each cell on one GPU, but plan tensor_parallel's cells "
        "use 2 GPUs each"
    ]


def test_bad_plan_cell_and_machine_are_one_line(tmp_path: Path) -> None:
    missing = kit("run", "no_such_plan", str(tmp_path / "out"), "--dry")
    assert missing.returncode != 0
    assert "no plan 'no_such_plan': expected one of" in missing.stderr
    plan = tmp_path / "tiny.py"
    plan.write_text(TINY_PLAN)
    unknown = kit("run", str(plan), str(tmp_path / "o"), "--dry", "--machine",
                  str(tmp_path / "m"), "--only", "nope")  # fmt: skip
    assert "no cells ['nope'] in plan tiny" in unknown.stderr
    if shutil.which("nvidia-smi") is None:
        no_gpu = kit("run", str(plan), str(tmp_path / "g"), "--machine", str(tmp_path / "m"))
        assert "no GPU here (nvidia-smi lists none); --dry runs on the CPU" in no_gpu.stderr
    nothing = kit("unpack", str(tmp_path))
    assert "has no env.txt: expected the files of a kit call" in nothing.stderr


def _packed_site(folder: Path, *names: str) -> None:
    """A packed site as ``gpu_kit.py wheels`` leaves it, made by hand: a package per name."""
    folder.mkdir(exist_ok=True)
    with tarfile.open(folder / "site.tar.xz", "w:xz") as tar:
        for name in names:
            data = b"VALUE = 7\n"
            member = tarfile.TarInfo(f"./{name}/__init__.py")
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
    (folder / "PINS").write_text("".join(f"{name}==1.0\n" for name in names))


def test_wheels_install_once_per_machine(tmp_path: Path) -> None:
    module = kit_module()
    wheels, site = tmp_path / "wheels", tmp_path / "site"
    _packed_site(wheels, "kittest_one")
    assert "wheels: 1 installed in" in module.install_wheels(wheels, site)
    assert (site / "kittest_one" / "__init__.py").read_text() == "VALUE = 7\n"
    assert module.install_wheels(wheels, site) == "wheels: 1 installed already"
    _packed_site(wheels, "kittest_one", "kittest_two")  # another set: unpacked afresh
    assert "wheels: 2 installed in" in module.install_wheels(wheels, site)
    assert (site / "kittest_two").is_dir()


def test_a_call_without_the_plans_wheels_is_refused_naming_them(tmp_path: Path) -> None:
    """A .whl-kit/ packed for another plan: the call would fail at a cell's first import."""
    module = kit_module()
    plan = module.Plan(name="p", results="p", cells=lambda kit: [], summarize=None,
                       wheels=("cupti", "fleet"))  # fmt: skip
    needed = module._pins({"base", "cupti", "fleet"})
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "PINS").write_text("\n".join(p for p in needed if "cupti" not in p))
    assert module.missing_wheels(plan, wheels) == [*(p for p in needed if "cupti" in p), "etcd.xz"]
    (wheels / "PINS").write_text("\n".join(needed).replace("_", "-"))  # names as pip spells them
    (wheels / "etcd.xz").write_bytes(b"")
    assert module.missing_wheels(plan, wheels) == []


def test_snapshot_runs_one_commit_with_the_repository_results(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "benchmarks" / "plans").mkdir(parents=True)
    (repo / "mlms").mkdir()
    (repo / "tests").mkdir()
    shutil.copy(KIT, repo / "benchmarks" / "gpu_kit.py")
    for listed in ("gpu_wheels.txt", "gpu_image_packages.txt"):  # what a dry run emulates
        shutil.copy(KIT.parent / listed, repo / "benchmarks" / listed)
    (repo / "benchmarks" / "plans" / "tiny.py").write_text(TINY_PLAN)
    (repo / "mlms" / "__init__.py").write_text("")
    (repo / "tests" / "__init__.py").write_text("")
    (repo / "pyproject.toml").write_text("")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "add", "."], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "one"], cwd=repo, check=True)
    (repo / "benchmarks" / "plans" / "tiny.py").write_text("broken in the working tree (")
    made = kit("snapshot", kit_path=repo / "benchmarks" / "gpu_kit.py", cwd=repo)
    assert made.returncode == 0, made.stderr
    snapped = repo / ".kit-src" / "benchmarks" / "gpu_kit.py"
    ran = kit("run", "tiny", str(tmp_path / "out"), "--dry", "--machine", str(tmp_path / "m"),
              "--results", str(repo / "benchmarks" / "results" / "tiny"), "--only", "first",
              kit_path=snapped, cwd=repo)  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo,
                            capture_output=True, text=True).stdout.strip()  # fmt: skip
    with tarfile.open(tmp_path / "out" / "results.tar.gz") as tar:
        cell = json.load(tar.extractfile("cells/first/cell.json"))  # type: ignore[arg-type]
    assert cell["commit"] == commit
    unpacked = kit("unpack", str(tmp_path / "out"), kit_path=snapped, cwd=repo)
    assert unpacked.returncode == 0, unpacked.stderr
    first = repo / "benchmarks" / "results" / "tiny" / "cells" / "first"
    assert (first / "x.txt").is_file()
    # The code that ran is named by its digest, and the unpacking finds its commit.
    assert json.loads((first / "cell.json").read_text())["code_commit"] == commit
    assert f"cell first: code {cell['code']}, commit {commit}" in unpacked.stdout


def test_the_code_digest_names_a_tree_as_git_holds_it(tmp_path: Path) -> None:
    """The digest of files on disk equals the one read from a commit's tree (without a
    checkout), and moves with any code file, but not with a results folder's."""
    module = kit_module()
    repo = tmp_path / "repo"
    (repo / "mlms").mkdir(parents=True)
    (repo / "benchmarks" / "results").mkdir(parents=True)
    (repo / "mlms" / "a.py").write_text("x = 1\n")
    (repo / "benchmarks" / "results" / "r.txt").write_text("a result\n")
    (repo / "pyproject.toml").write_text("[project]\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "add", "."], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "one"], cwd=repo, check=True)
    commit = subprocess.run(["git", "rev-parse", "--short=7", "HEAD"], cwd=repo,
                            capture_output=True, text=True).stdout.strip()  # fmt: skip
    digest = module.code_digest(repo)
    assert module.commit_of_code(digest, repo) == commit
    (repo / "benchmarks" / "results" / "r.txt").write_text("another result\n")
    assert module.code_digest(repo) == digest
    (repo / "mlms" / "a.py").write_text("x = 2\n")
    assert module.code_digest(repo) != digest
    assert module.commit_of_code(module.code_digest(repo), repo) is None


@pytest.mark.parametrize(
    "plan", sorted(p.stem for p in (ROOT / "benchmarks" / "plans").glob("*.py"))
)
def test_every_plan_lists_runnable_cells(plan: str) -> None:
    module = kit_module()
    loaded = module.load_plan(plan)
    for dry in (True, False):
        cells = loaded.cells(module.Kit(dry=dry, python=sys.executable, gpus=("NVIDIA H200",)))
        assert cells and len({c.name for c in cells}) == len(cells)
        for cell in cells:
            scripts = [part for part in cell.argv if part.endswith(".py")]
            assert all((ROOT / script).is_file() for script in scripts), cell
    groups = {group for line in (ROOT / "benchmarks" / "gpu_wheels.txt").read_text()
              .splitlines() if line.strip() and not line.startswith("#")
              for group in line.split()[0].split(",")}  # fmt: skip
    assert set(loaded.wheels) <= groups


IMAGE_PLAN = """
from benchmarks.gpu_kit import Cell

RESULTS = "image"
WHEELS = ()

def cells(kit):
    def importing(name, module):
        return Cell(name, ("{python}", "-c", f"import {module}"), min_s=0)
    # numpy is on the image, sqlalchemy among every plan's wheels, plotly only in the "site" group;
    # a probe finds nothing where the image has nothing
    probe = ("import importlib.util, importlib.metadata as m, sys; sys.exit("
             "importlib.util.find_spec('uvicorn') is not None or 'uvicorn' in "
             "[d.metadata['Name'] for d in m.distributions()])")
    return [importing("on_image", "numpy"), importing("carried", "sqlalchemy"),
            importing("lacking", "plotly.graph_objects"), Cell("probe", ("{python}", "-c", probe))]
"""


def test_a_dry_run_refuses_what_the_gpu_image_lacks(tmp_path: Path) -> None:
    """A cell importing a package that is neither on the image nor among the plan's wheels
    fails in dry mode as it would on the GPU; the plan that carries it runs."""
    pytest.importorskip("plotly")
    plan = tmp_path / "image.py"
    plan.write_text(IMAGE_PLAN)
    common = ["--dry", "--machine", str(tmp_path / "m"), "--results", str(tmp_path / "r")]
    refused = kit("run", str(plan), str(tmp_path / "out"), *common)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "| on_image | done |" in refused.stdout and "| carried | done |" in refused.stdout
    assert "| lacking | failed |" in refused.stdout and "| probe | done |" in refused.stdout
    assert "No module named 'plotly'" in refused.stdout
    assert "distributions hidden: " in (tmp_path / "out" / "env.txt").read_text()
    plan.write_text(IMAGE_PLAN.replace("WHEELS = ()", "WHEELS = ('site',)"))
    carried = kit("run", str(plan), str(tmp_path / "out2"), *common, "--only", "lacking",
                  "--retry-failed")  # fmt: skip
    assert carried.returncode == 0 and "| lacking | done |" in carried.stdout, carried.stdout


def test_the_image_is_read_with_its_versions_and_its_packages_requirements(tmp_path: Path) -> None:
    """A package the image holds below mlms's floor counts as missing (its grpcio is older than
    the generated code); what an image package requires here counts as there."""
    module = kit_module()
    plan = tmp_path / "image.py"
    plan.write_text(IMAGE_PLAN)
    _, bare = module.missing_on_image(module.load_plan(str(plan)))
    assert "grpcio" in bare and "plotly" in bare and "torch" not in bare
    assert "sqlalchemy" not in bare and "duckdb" in bare  # base's; the analysis group's
    if "httpx2" in {module._canonical(d.metadata["Name"]) for d in metadata.distributions()}:
        assert "httpx2" not in bare  # this huggingface_hub's; the image's has its own
    plan.write_text(IMAGE_PLAN.replace("WHEELS = ()", "WHEELS = ('grpc', 'site')"))
    _, carried = module.missing_on_image(module.load_plan(str(plan)))
    assert "grpcio" not in carried and "plotly" not in carried


def test_a_call_carries_the_wheel_groups_it_names_instead_of_the_plans() -> None:
    """``--groups`` for a call whose cells import less than the whole plan: the call's pins
    (what ``wheels`` downloads and ``run`` requires) are base's and those groups' only."""
    module = kit_module()
    plan = module.load_plan("zoo_sweep")
    assert "cupti" in plan.wheels
    lighter = module.with_groups(plan, "grpc,keras")
    assert lighter.wheels == ("grpc", "keras")
    pins = module._pins({"base", *lighter.wheels})
    assert not any(pin.startswith("cupti-python==") for pin in pins)
    assert any(pin.startswith("keras==") for pin in pins)
    assert module.with_groups(plan, "base").wheels == ()
    assert module.with_groups(plan, None) is plan
    with pytest.raises(SystemExit, match=r"no wheel groups \['cuda'\]"):
        module.with_groups(plan, "grpc,cuda")


def test_a_call_too_large_names_the_results_it_can_leave_behind(tmp_path, monkeypatch) -> None:
    """Largest first, by disk space, never the folder of the call's own plan."""
    module = kit_module()
    results = tmp_path / "results"
    for name, size in (("small", 10_000), ("big", 3_000_000), ("mine", 9_000_000)):
        (results / name / "cells").mkdir(parents=True)
        (results / name / "cells" / "data").write_bytes(os.urandom(size))
    (results / "loose.md").write_text("not a folder")
    monkeypatch.setattr(module, "RESULTS", results)
    parked = module.parkable({"mine"})
    assert [folder.name for folder, _ in parked] == ["big", "small"]
    assert parked[0][1] >= 3_000_000 > parked[1][1]
    # As many as the call is too large by, and no more.
    assert [folder.name for folder, _ in module.to_park({"mine"}, 1_000_000)] == ["big"]
    assert [f.name for f, _ in module.to_park({"mine"}, parked[0][1] + 1)] == ["big", "small"]


def test_gpu_halves_summary_shows_what_the_hardware_level_costs_together_over_apart(
    tmp_path: Path,
) -> None:
    """From a hardware cell's overhead.json: each configuration's slowdown less 1, and the
    layers and CUPTI together less their costs apart; from the plan's two hardware_cost calls,
    how far they agree."""

    def cell(name: str, slowdowns: dict[str, float]) -> None:
        folder = tmp_path / "cells" / name
        folder.mkdir(parents=True)
        (folder / "cell.json").write_text(json.dumps({"status": "done", "wall_s": 1.0}))
        measured = {label: {"slowdown": value} for label, value in slowdowns.items()}
        (folder / "overhead.json").write_text(json.dumps({"1": measured}))

    cell("hardware_parts", {"plain": 1.0, "mlms layers": 1.1, "mlms cupti": 1.2,
                            "mlms layers+cupti": 1.5})  # fmt: skip
    for call, hardware in (("1", 1.2), ("2", 1.32)):
        cell(f"hardware_cost_{call}", {"plain": 1.0, "mlms layers+cupti": hardware,
                                       "torch.profiler cpu+cuda": 1.3})  # fmt: skip
    plan = kit_module().load_plan("gpu_halves")
    text = plan.summarize(tmp_path)
    assert "| batch | layers | cupti | layers+cupti | together - apart |" in text
    assert "| 1 | +0.100 | +0.200 | +0.500 | +0.200 |" in text
    assert "| hardware_cost_2 | 1 | 1.320 | - | 1.300 |" in text
    assert "- batch 1: 1.100" in text


def test_gpu_halves_summary_sets_the_hardware_levels_host_forward_against_the_gpus_work(
    tmp_path: Path,
) -> None:
    """From a hardware_cost call: the host's forward with the layers and with CUPTI as well,
    the GPU's busy time, CUPTI's host microseconds per kernel launched and the slowdown, per
    batch size; a call from before the forward was timed is left out of that table."""
    layers = {"slowdown": 1.01, "forward_host_ms": 7.0}
    hardware = {"slowdown": 1.2, "forward_host_ms": 8.74, "gpu_busy_ms": 6.9,
                "kernels_per_predict": 174.0}  # fmt: skip
    for name, measured in (
        ("hardware_cost_1", {"plain": {}, "mlms layers": layers, "mlms layers+cupti": hardware}),
        ("hardware_cost_s30", {"plain": {}, "mlms layers+cupti": {"slowdown": 1.3}}),
    ):
        folder = tmp_path / "cells" / name
        folder.mkdir(parents=True)
        (folder / "cell.json").write_text(json.dumps({"status": "done", "wall_s": 1.0}))
        (folder / "overhead.json").write_text(json.dumps({"16": measured}))
    text = kit_module().load_plan("gpu_halves").summarize(tmp_path)
    table = text.split("host forward against the GPU's work")[1].split("\n\n")[1]
    assert table.splitlines()[2:] == [
        "| hardware_cost_1 | 16 | 7.000 | 8.740 | 6.900 | 10.0 | 1.200 |"
    ]


def test_gpu_halves_summary_tells_hosts_that_differ_from_rounds_too_few(tmp_path: Path) -> None:
    """The plan's two hardware_cost calls, per batch size: where each call's interval of its
    median round ratio lies apart from the other's, the calls measured different hosts (their
    plain launches are named); where the intervals overlap, the rounds do not tell them
    apart."""
    steady = [1.30, 1.31, 1.29, 1.30, 1.32, 1.28, 1.30, 1.31]
    for call, shift, launch in (("1", 0.0, 5.0), ("2", -0.1, 3.5)):
        batches = {
            "1": {"plain": {"slowdown": 1.0, "launch_ms": launch},
                  "mlms layers+cupti": {"slowdown": 1.3 + shift,
                                        "round_ratios": [r + shift for r in steady]}},
            "16": {"plain": {"slowdown": 1.0, "launch_ms": launch},
                   "mlms layers+cupti": {"slowdown": 1.02,
                                         "round_ratios": [1.0, 1.05, 1.01, 1.03, 1.02]}},
        }  # fmt: skip
        folder = tmp_path / "cells" / f"hardware_cost_{call}"
        folder.mkdir(parents=True)
        (folder / "cell.json").write_text(json.dumps({"status": "done", "wall_s": 1.0}))
        (folder / "overhead.json").write_text(json.dumps(batches))
    text = kit_module().load_plan("gpu_halves").summarize(tmp_path)
    (one,) = [line for line in text.splitlines() if line.startswith("- batch 1:")]
    assert one.startswith("- batch 1: 1.083; each call's 95 % interval 1.290-1.310 and 1.190-")
    assert one.endswith("apart: the hosts differed (plain launch 5.000 and 3.500 ms), not the "
                        "rounds too few")  # fmt: skip
    (sixteen,) = [line for line in text.splitlines() if line.startswith("- batch 16:")]
    assert sixteen.startswith("- batch 16: 1.000; ")
    assert sixteen.endswith("overlapping: within what the rounds resolve")

"""``benchmarks/advise_replay.py`` against a recording ``benchmarks/advise_check.py`` made of real
evaluations (digits_cnn on this CPU, a space of 8 configurations): advise replayed on the
recorded measurements reproduces the live advice, a changed request replays without running
anything, and a bad change is one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SPACE = ("--models", "digits_cnn", "--frameworks", "torch", "--hw", "cpu",
         "--precisions", "fp32,bf16", "--threads", "1,2", "--compile", "none",
         "--batch-sizes", "1", "--iterations", "4", "--min-seconds", "0.02",
         "--probe-iterations", "3", "--probe-min-seconds", "0.01", "--verify", "2",
         "--paired-rounds", "0")  # fmt: skip


def _script(name: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / name), *args],
        capture_output=True, text=True, timeout=300, env=env, cwd=REPO,
    )  # fmt: skip


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory, mlms_home: Path) -> Path:
    """advise_check.py's recording, in a store of its own that shares the run's built model
    assets (digits_cnn is built once for the run, not again here)."""
    folder = tmp_path_factory.mktemp("advise-check")
    models = mlms_home / "store" / "models"
    models.mkdir(parents=True, exist_ok=True)
    (folder / "home" / "store").mkdir(parents=True)
    (folder / "home" / "store" / "models").symlink_to(models, target_is_directory=True)
    done = _script("advise_check.py", *SPACE, "--home", str(folder / "home"), "--out",
                   str(folder / "out"))  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return folder / "out" / "digits_cnn_evaluations.json"


def test_a_replay_of_unchanged_code_reproduces_the_live_advice(recording: Path, tmp_path) -> None:
    out = tmp_path / "replay.json"
    done = _script("advise_replay.py", str(recording), "--quiet", "--out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    (result,) = json.loads(out.read_text())
    live, again = result["live"], result["replay"]
    assert result["reproduced"] and result["from_sweep"] == 0
    assert again["recommended"] == live["recommended"] != "-"
    assert again["evaluations"] == live["evaluations"] > 0
    # The replay's clock is the recorded evaluations' wall time, not its own.
    assert again["seconds"] == pytest.approx(live["seconds"], rel=0.25)
    assert "replay reproduced the live run: yes" in done.stdout
    # Each configuration verified live, as the sweep measured it again beside advise's value.
    observations = json.loads(recording.read_text())["advice"]["observations"]
    verified = [o for o in observations if o["source"] == "verified"]
    assert verified and len(result["repeats"]) == len(verified)
    assert all(ratio > 0 for ratio in result["repeats"])
    assert f"the {len(verified)} configuration(s) advise verified" in done.stdout


def test_a_changed_request_replays_on_the_same_measurements(recording: Path, tmp_path) -> None:
    """With 8 verifications asked, probing would cost as much as the space: the replay measures
    its 8 settings whole. At a length advise never ran (5 iterations, the recording's 4), none
    is advise's own evaluation, so each is answered by the sweep's."""
    out = tmp_path / "replay.json"
    done = _script("advise_replay.py", str(recording), "--quiet", "--set", "verify=8",
                   "--set", "iterations=5", "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    (result,) = json.loads(out.read_text())
    assert result["replay"]["evaluations"] == result["from_sweep"] == 8
    assert not result["reproduced"] and result["replay"]["recommended"] != "-"


@pytest.mark.parametrize(
    ("change", "named"),
    [("verif=1", "'verif=1': expected FIELD=VALUE"), ("verify=x", "verify='x'")],
)
def test_a_bad_change_is_one_line(recording: Path, change: str, named: str) -> None:
    done = _script("advise_replay.py", str(recording), "--set", change)
    assert done.returncode == 2
    (line,) = [x for x in done.stderr.splitlines() if "error:" in x]
    assert named in line


@pytest.mark.parametrize(
    ("in_order", "start"),
    [
        # The first compile took 21.3 s, the later ones 10.8-14.6: 9.75 s beyond their median.
        ([(False, 1.1), (True, 21.3), (True, 10.8), (False, 1.0), (True, 14.6), (True, 11.2),
          (True, 11.9)], 9.75),
        ([(True, 8.0), (True, 9.0), (True, 11.0)], 0.0),  # no dearer than the later ones
        ([(False, 1.0), (True, 30.0)], 0.0),  # one compile: nothing to set it against
    ],
)  # fmt: skip
def test_the_compilers_start_is_what_the_first_compile_took_beyond_the_later_ones(
    in_order: list[tuple[bool, float]], start: float
) -> None:
    """What the replay charges to the first compiled evaluation it asks for, whichever that
    is, taken off the one that ran first live."""
    from benchmarks.advise_replay import compile_start

    assert compile_start(in_order) == pytest.approx(start)


def test_a_started_compiler_is_charged_to_no_evaluation(tmp_path) -> None:
    """Session 37's recording of resnet50 on an H200 (committed): replayed with the compiler
    started before advise's clock, advise asks for the same evaluations and recommends the same,
    in the compiler's start less time."""
    recorded = REPO / "benchmarks/results/gpu_halves/cells/advise_resnet50_s37"
    results = {}
    for started in (False, True):
        out = tmp_path / f"{started}.json"
        flags = ["--compiler-started"] if started else []
        done = _script("advise_replay.py", str(recorded / "resnet50_evaluations.json"),
                       "--quiet", "--out", str(out), *flags)  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        (results[started],) = json.loads(out.read_text())
    charged, started = results[False], results[True]
    assert charged["compile_start_s"] > 1.0 and not started["compile_start_charged"]
    assert started["replay"]["seconds"] == pytest.approx(
        charged["replay"]["seconds"] - charged["compile_start_s"]
    )
    for key in ("recommended", "evaluations", "compiled", "quality"):
        assert started["replay"][key] == charged["replay"][key]

"""issue 49, item 3: one read-only command per verdict.

`python -m reweighter_research.decision --verdicts DIR` prints every verdict of an experiment
folder recomputed from its committed files. Here: README's Results table, each command run as
written in a fresh process, prints the verdict the table states and the figures the library
recomputes from the data (tests/research/test_science_audit.py ties those to EXPERIMENTS.md's
text); over every folder of experiments/ the command writes nothing (the tree byte-identical
after); and each verdict it recomputes equals what the folder's files stored.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from reweighter_research import decision as dc
from reweighter_research import verdicts as V

from .test_experiments_readme import results_table

REPO = Path(__file__).resolve().parents[2]
EXP = REPO / "experiments"
VERDICT = re.compile(r"^(\S+): (refuted|speeds up|inconclusive|no verdict)\b", re.M)


def run_as_written(cmd: str) -> str:
    """`cmd` in a fresh interpreter from the repository's root, as a reader types it there."""
    argv = shlex.split(cmd)
    assert argv[:2] == ["python", "-m"] and argv[2].startswith("reweighter_research."), cmd
    done = subprocess.run([sys.executable, *argv[1:]], cwd=REPO, capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def snapshot(root: Path) -> dict[str, tuple[int, str]]:
    """Every file under `root`: (size, sha256), by relative path; folders too (size -1)."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        out[rel] = (p.stat().st_size, hashlib.sha256(p.read_bytes()).hexdigest()) \
            if p.is_file() else (-1, "")
    return out


def test_the_results_table_names_one_command_per_experiment() -> None:
    rows = results_table()
    names = [r[0].split(":")[0] for r in rows]
    assert names[:4] == ["picktwo", "picktwo at a larger scale", "pickone", "wordadd"]
    for _, _, cmd in rows:
        argv = shlex.split(cmd)
        assert argv[:2] == ["python", "-m"] and argv[2].startswith("reweighter_research."), cmd
        folder = REPO / argv[-1]
        assert argv[-1].startswith("experiments/") and folder.is_dir(), cmd
    for _, _, cmd in rows[:4]:  # the decided experiments: decision --verdicts on their data
        assert cmd.startswith("python -m reweighter_research.decision --verdicts experiments/")
        assert (REPO / shlex.split(cmd)[-1] / "results.json").is_file(), cmd


def expected(verdict: str, out: str) -> None:
    """The table's verdict cell against the command's printed verdict lines."""
    arms = dict(VERDICT.findall(out))
    if verdict.startswith("refuted"):
        assert arms and set(arms.values()) == {"refuted"}, arms
        if "(MMR)" in verdict:
            assert set(arms) == {"mmr"}
        else:
            assert "for every arm" in verdict and len(arms) >= 2
    elif verdict.startswith("not run"):
        assert "not run" in out, out
    elif "no verdict" in verdict:
        assert arms and set(arms.values()) == {"no verdict"}, arms
        runs = re.search(r"(\d+) of \d+ runs", verdict)
        assert runs and f"; {runs.group(1)} runs in results.json)" in out
    else:  # a reading: the cell up to its parenthesis is printed as it stands
        assert verdict.split(" (")[0] in out, verdict
        said = re.search(r"its rule said (\w+)", verdict)
        assert not said or said.group(1) in arms.values()


@pytest.mark.process
@pytest.mark.parametrize("row", results_table(), ids=lambda r: r[0].split(":")[0])
def test_the_readme_commands_as_written(row: tuple[str, str, str]) -> None:
    _, verdict, cmd = row
    out = run_as_written(cmd)
    expected(verdict, out)
    assert "matches results.json: false" not in out
    if "--verdicts" in cmd and (REPO / shlex.split(cmd)[-1] / "results.json").is_file():
        assert "matches results.json: true" in out


@pytest.mark.process
def test_the_picktwo_command_prints_the_figures_the_library_recomputes() -> None:
    """The printed figures of `--verdicts experiments/picktwo-main` are the library's, from the
    committed curves and logs: delta_2x from the pilot's curves, each arm's interval, p, power
    at its spread and excluded speed-ups, the speed-up map, Bonferroni, zero-signal groups and
    the Darling replay."""
    cmd = "python -m reweighter_research.decision --verdicts experiments/picktwo-main"
    assert f"`{cmd}`" in " ".join((REPO / "EXPERIMENTS.md").read_text().split())
    out = run_as_written(cmd)
    main = json.loads((EXP / "picktwo-main" / "results.json").read_text())
    pilot = V.grpo_curves(json.loads((EXP / "picktwo-pilot-lr5e-6" / "results.json").read_text()))
    own = V.grpo_curves(main)
    delta = dc.delta_for_speedup(pilot)
    assert f"delta_2x {delta:.6f} (from the 2 GRPO curves of picktwo-pilot-lr5e-6" in out
    got = dc.area_decision(main["runs"], delta, arms=["mmr", "dra", "darling", "grpo-passk"])
    for arm, v in got["intervals"].items():
        lo, hi = v["interval"]
        sd = float(np.std(v["diffs"], ddof=1))
        line = next(ln for ln in out.splitlines() if ln.startswith(f"{arm}: "))
        assert line.startswith(f"{arm}: {v['verdict']} | mean {v['mean']:+.3f}, 98.75 % "
                               f"interval {lo:+.3f} to {hi:+.3f}, n 12, p "
                               f"{V.paired_p(v['diffs']):.3f} unadjusted"), line
        assert f"power at its paired sd {sd:.3f}: {V.t_power(sd, 12, delta, 4):.3f}" in line
        assert (f"excludes speed-ups from {dc.excluded_from(hi, pilot):.2f}x (picktwo-pilot-lr5e-6"
                f" curves), {dc.excluded_from(hi, own):.2f}x (this run's 12 GRPO curves), "
                "post hoc") in line
    m = V.speedup_map(pilot, delta)
    assert (f"a {m['first_reaching']:.2f}x speed-up already predicts {m['gain_at_first']:.4f} "
            f">= delta_2x; {m['down_steps']} of 199 grid steps go down") in out
    fam = V.secondary_family(main["runs"], ["mmr", "dra", "darling", "grpo-passk"])
    for s in fam:
        assert (f"secondary {s['arm']} {s['metric']}: {s['mean']:+.3f} " in out
                and f"Bonferroni x16 {s['p_bonferroni']:.3f}" + (" survives" if s["survives"]
                                                                  else "") in out)
    z = V.zero_signal(EXP / "picktwo-main" / "runs", "grpo-passk")
    assert f"zero-signal groups grpo-passk: {z['zero']} of {z['groups']}" in out
    rep = V.darling_replay(EXP / "picktwo-main" / "runs")
    assert (f"max deviation {rep['max_dev_prefix_rule']:.3g}, vs the shipped rule "
            f"{rep['max_dev_shipped_rule']:.3g}, over {rep['groups']} groups; std "
            "normalisation on") in out


@pytest.mark.process
def test_verdicts_over_every_folder_write_nothing() -> None:
    """The command over experiments/ (every folder) leaves the tree byte-identical, and prints
    a head for every folder, a verdict or the reason there is none."""
    cmd = "python -m reweighter_research.decision --verdicts experiments"
    assert f"`{cmd}`" in (REPO / "EXPERIMENTS.md").read_text()  # the command EXPERIMENTS gives
    before = snapshot(EXP)
    status = subprocess.run(["git", "status", "--porcelain", "--ignored", "--", "experiments"],
                            cwd=REPO, capture_output=True, text=True, check=True).stdout
    out = run_as_written(cmd)
    assert snapshot(EXP) == before
    assert subprocess.run(["git", "status", "--porcelain", "--ignored", "--", "experiments"],
                          cwd=REPO, capture_output=True, text=True,
                          check=True).stdout == status
    heads = set(re.findall(r"^== (\S+): ", out, re.M))
    assert heads == {p.name for p in EXP.iterdir() if p.is_dir()}
    assert "matches results.json: false" not in out and "matches gate.json: false" not in out


FAST = ["pickone-6seed", "picktwo-scale", "wordadd-main", "picktwo-pilot",
        "picktwo-pilot-lr5e-6", "picktwo-gate", "wordadd-gate", "pickone-gate",
        "picktwo-provisional"]
"""Folders whose verdicts need no torch (picktwo-main replays Darling: the process tests)."""


@pytest.mark.parametrize("name", FAST)
def test_each_recomputed_verdict_is_the_stored_one(name: str) -> None:
    found = V.verdicts(EXP / name)
    assert found and all(v.get("matches", True) for v in found), found
    if name == "picktwo-provisional":  # pickone's grpo curves, copied: no verdict of its own
        assert found[0]["kind"] == "no verdict of its own"
    if name == "pickone-6seed":
        area = found[0]["area"]
        assert area["ci95"][0] < 0 < area["delta_2x"] < area["ci95"][1]
        assert area["reading"] == "no evidence of a 2x speed-up, and a 2x speed-up not excluded"
    if name == "picktwo-pilot":  # pilot 1 saturated (rule item 3): halve the learning rate
        assert found[0]["verdict"].startswith("saturated") and found[0]["last10"] > 0.85
    if name == "picktwo-pilot-lr5e-6":
        assert found[0]["delta_2x"] == pytest.approx(found[0]["delta_2x_stored"], abs=1e-12)


def test_the_verdict_functions_open_nothing_for_writing() -> None:
    """Read-only by construction: verdicts.py has no write call at all."""
    src = (REPO / "research" / "reweighter_research" / "verdicts.py").read_text()
    assert not re.search(r"write_text|write_bytes|\.write\(|open\([^)]*['\"][wax+]", src)


def test_a_pre_registered_folder_without_data_says_not_run() -> None:
    """A folder with its pre-registration and no results.json (picktwo's positive control until
    a GPU runs it) prints "not run", not "no pre-registered rule"."""
    folder = EXP / "picktwo-control"
    if (folder / "results.json").is_file():
        pytest.skip("the control has data: its verdict is the control rule's")
    assert V.folders(folder) == [folder]
    (v,) = V.verdicts(folder)
    assert v["kind"] == "pre-registered, no data" and v["note"].startswith("not run:")

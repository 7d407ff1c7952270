"""Declared studies are declared before their results, from git; the gate map's seeds are fresh; it expands.

For every ``experiments/*.json`` whose analysis block says "before running": the commit that added the
file must be an ancestor of the first commit holding any of its runs, no invocation in its
``environment.json`` may have started before that commit, and the analysis block must still be the one
that commit holds. Catches: results committed first and a plan written to fit them; a plan edited after
its runs; a declaration backdated in its own text. The checks are planted in a scratch repository below.
"""

import json
import subprocess
from datetime import datetime
from pathlib import Path

import pytest

from sapo_lab.cli import main
from sapo_lab.studies import expand_runs, load_declaration

ROOT = Path(__file__).resolve().parents[2]
MAP = "gate_map"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def first_commit(repo: Path, path: str) -> str | None:
    """The oldest commit that added ``path`` (a file or anything under a folder), or None."""
    out = git(repo, "log", "--diff-filter=A", "--format=%H", "--reverse", "--", path)
    return out.splitlines()[0] if out else None


def declaration_problems(repo: Path) -> list[str]:
    """One line per declared-before-running study whose history contradicts its claim."""
    problems = []
    for path in sorted((repo / "experiments").glob("*.json")):
        decl = json.loads(path.read_text())
        if decl.get("analysis", {}).get("declared") != "before running":
            continue
        name, rel = decl["name"], f"experiments/{path.name}"
        declared = first_commit(repo, rel)
        if declared is None:
            problems.append(f"{name}: declared before running but {rel} is not committed")
            continue
        at_declaration = json.loads(git(repo, "show", f"{declared}:{rel}"))
        if at_declaration.get("analysis") != decl["analysis"]:
            problems.append(f"{name}: the analysis block changed after its declaration commit {declared[:7]}")
        first_result = first_commit(repo, f"results/{name}/runs")
        if first_result is not None:
            ancestor = subprocess.run(["git", "-C", str(repo), "merge-base", "--is-ancestor", declared, first_result])
            if first_result == declared or ancestor.returncode != 0:
                problems.append(f"{name}: runs committed in {first_result[:7]}, not after the declaration {declared[:7]}")
        env = repo / "results" / name / "environment.json"
        if env.is_file():
            declared_at = datetime.fromisoformat(git(repo, "show", "-s", "--format=%cI", declared))
            started = min(datetime.fromisoformat(inv["started_utc"]) for inv in json.loads(env.read_text())["invocations"])
            if started < declared_at:
                problems.append(f"{name}: a run started {started.isoformat()}, before the declaration {declared_at.isoformat()}")
    return problems


def reused_seeds(repo: Path, name: str) -> dict[str, list[int]]:
    """Seeds of study ``name`` that another declaration or committed study already used, by study."""
    mine = set(json.loads((repo / "experiments" / f"{name}.json").read_text())["seeds"])
    others = {}
    for path in [*(repo / "experiments").glob("*.json"), *(repo / "results").glob("*/study.json")]:
        decl = json.loads(path.read_text())
        if decl["name"] != name and mine & set(decl["seeds"]):
            others[decl["name"]] = sorted(mine & set(decl["seeds"]))
    return others


def _is_git_checkout() -> bool:
    try:
        return git(ROOT, "rev-parse", "--is-shallow-repository") == "false"
    except (subprocess.CalledProcessError, FileNotFoundError):
        return False


@pytest.mark.skipif(not _is_git_checkout(), reason="needs the repository's full git history")
def test_every_declared_study_was_declared_before_its_runs():
    assert declaration_problems(ROOT) == []
    assert load_declaration(str(ROOT / "experiments" / f"{MAP}.json"))["analysis"]["declared"] == "before running"


def test_the_gate_map_seeds_are_fresh():
    assert reused_seeds(ROOT, MAP) == {}


# ---------------------------------------------------------------- the checks, on planted histories


def _decl(name, seeds, declared="before running", alpha=0.05):
    return {"name": name, "seeds": seeds, "analysis": {"declared": declared, "alpha": alpha}}


def _commit(repo, files: dict, message: str, when: str):
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    git(repo, "add", *files)
    env = f"{when}T12:00:00+00:00"
    subprocess.run(["git", "-C", str(repo), "commit", "-q", "-m", message], check=True,
                   env={"GIT_AUTHOR_DATE": env, "GIT_COMMITTER_DATE": env, "GIT_AUTHOR_NAME": "t",
                        "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
                        "HOME": str(repo), "PATH": "/usr/bin:/bin"})


def _env(started):
    return json.dumps({"invocations": [{"started_utc": started}]})


@pytest.fixture
def repo(tmp_path):
    git(tmp_path, "init", "-q")
    return tmp_path


def test_a_declaration_after_its_results_is_caught(repo):
    _commit(repo, {"results/late/runs/a_seed0/metrics.jsonl": "{}\n"}, "results first", "2026-01-01")
    _commit(repo, {"experiments/late.json": json.dumps(_decl("late", [0]))}, "then the plan", "2026-01-02")
    _commit(repo, {"experiments/ok.json": json.dumps(_decl("ok", [1]))}, "plan", "2026-01-03")
    _commit(repo, {"results/ok/runs/a_seed1/metrics.jsonl": "{}\n",
                   "results/ok/environment.json": _env("2026-01-04T00:00:00+00:00")}, "runs", "2026-01-04")
    assert [p.split(":")[0] for p in declaration_problems(repo)] == ["late"]


def test_a_plan_edited_after_declaration_or_a_run_started_before_it_is_caught(repo):
    _commit(repo, {"experiments/edit.json": json.dumps(_decl("edit", [0])),
                   "experiments/early.json": json.dumps(_decl("early", [1]))}, "plans", "2026-01-02")
    _commit(repo, {"results/early/runs/a_seed1/metrics.jsonl": "{}\n",
                   "results/early/environment.json": _env("2026-01-01T00:00:00+00:00")}, "runs", "2026-01-03")
    (repo / "experiments/edit.json").write_text(json.dumps(_decl("edit", [0], alpha=0.1)))  # uncommitted edit counts
    (repo / "experiments/uncommitted.json").write_text(json.dumps(_decl("uncommitted", [2])))
    (repo / "experiments/posthoc.json").write_text(json.dumps(_decl("posthoc", [3], declared="post hoc")))
    found = sorted(declaration_problems(repo))
    assert [p.split(":")[0] for p in found] == ["early", "edit", "uncommitted"]
    assert "before the declaration" in found[0] and "changed after" in found[1] and "not committed" in found[2]


def test_a_reused_seed_is_caught(tmp_path):
    (tmp_path / "experiments").mkdir()
    (tmp_path / "results" / "old").mkdir(parents=True)
    (tmp_path / "experiments" / "new.json").write_text(json.dumps(_decl("new", [20, 21, 22])))
    (tmp_path / "experiments" / "other.json").write_text(json.dumps(_decl("other", [0, 1])))
    (tmp_path / "results" / "old" / "study.json").write_text(json.dumps(_decl("old", [2, 21])))
    assert reused_seeds(tmp_path, "new") == {"old": [21]}


# ---------------------------------------------------------------- the gate map expands and lists


def test_the_gate_map_expands_to_its_declared_runs():
    study = load_declaration(str(ROOT / "experiments" / f"{MAP}.json"))
    runs = expand_runs(study)
    assert len(runs) == len(study["methods"]) * len(study["seeds"]) and len({r["run_id"] for r in runs}) == len(runs)
    for run in runs:  # what each method name says is what its config holds
        cfg = run["config"]
        m = int(run["method"].rsplit("_M", 1)[1])
        assert cfg.optimization.steps_per_generation == m and cfg.optimization.max_steps == study["budget"]["max_steps"]
        assert cfg.loss.loss_type == run["method"].split("_")[0]
        if "_lr" in run["method"]:
            assert cfg.optimization.learning_rate == float(run["method"].split("_lr")[1].split("_")[0])
        if "_tau_x" in run["method"]:
            scale = float(run["method"].split("_tau_x")[1].split("_")[0])
            assert cfg.loss.sapo_temperature_pos == pytest.approx(scale, rel=0.01)
            assert cfg.loss.sapo_temperature_neg == pytest.approx(1.05 * scale, rel=0.01)


def test_the_gate_map_lists_from_the_command_line(capsys, tmp_path):
    assert main(["study", str(ROOT / "experiments" / f"{MAP}.json"), "--list", "--results-root", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    study = load_declaration(str(ROOT / "experiments" / f"{MAP}.json"))
    assert len(lines) == len(study["methods"]) * len(study["seeds"])
    assert all(line.split()[0] == "pending" for line in lines)


def test_the_run_script_runs_every_declared_method_once_on_each_shard():
    # PY=echo prints each study command instead of running it; a method left out would never run
    out = subprocess.run(["bash", str(ROOT / "experiments" / "run_gate_map.sh")], env={"PY": "echo", "PATH": "/usr/bin:/bin"},
                         check=True, capture_output=True, text=True).stdout.split("\n")
    listed = {"0/2": [], "1/2": []}
    for line in filter(None, out):
        words = line.split()
        assert words[2:4] == ["study", f"experiments/{MAP}.json"], line
        listed[words[words.index("--shard") + 1]] += words[words.index("--methods") + 1].split(",")
    study = load_declaration(str(ROOT / "experiments" / f"{MAP}.json"))
    for methods in listed.values():
        assert sorted(methods) == sorted(study["methods"])
    # the declared questions' runs come first, so an interrupted map still answers them (140 runs, as declared)
    plan = study["analysis"]
    primary = {t[side] for t in plan["tests"] for side in ("method", "reference")}
    for c in plan["contrasts"]:
        primary |= {m for arm in c.get("arms", {}).values() for m in arm}
        primary |= {p[side] for p in c.get("points", []) for side in ("method", "reference")}
    assert set(listed["0/2"][: len(primary)]) == primary
    assert len(primary) * len(study["seeds"]) == 140 and "complete here, 140 runs" in study["description"]

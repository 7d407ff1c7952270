"""What a run and a study leave on disk is read through its owners (sapo_lab.runs.run_folder,
sapo_lab.runs.study_folder) and the typed readers on top (Study, Run), never by file name.

Catches: a chapter opening ``config.json`` or ``environment.json`` by hand again (it would decide
on its own what a missing or damaged file means), a reader returning something other than the
file's content, a study file counted as a user's file by the run-folder guard, and reading
results pulling in torch or pydantic (the evidence chapters would wait for them).
"""

import json
import pathlib
import re
import shutil

import pytest
from _heavy import heavy_modules_after

from sapo_lab.evidence.results import load_study, results_root, study_names
from sapo_lab.runs import run_folder, study_folder
from sapo_lab.runs.run_policy import classify

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "sapo_lab"

# Every file name a run or a study writes, taken from the owners themselves.
FILE_NAMES = sorted(
    {v for m in (run_folder, study_folder) for k, v in vars(m).items()
     if k.isupper() and isinstance(v, str) and re.fullmatch(r"[a-z_]+\.(json|jsonl|csv)", v)}
)


def _string_literals(source: str) -> list[str]:
    return [m.group(2) for m in re.finditer(r"""(['"])((?:(?!\1).)*)\1""", source)]


def spelled_file_names(code: str) -> list[str]:
    """The run and study file names written as a string literal (or a literal path ending in one) in ``code``."""
    found = []
    for text in _string_literals(code):
        last = text.replace("\\", "/").rsplit("/", 1)[-1]
        if last in FILE_NAMES:
            found.append(last)
    return found


def chapters_spelling_file_names(book: pathlib.Path) -> list[str]:
    found = []
    for nb in sorted(book.glob("*.ipynb")):
        for i, cell in enumerate(json.loads(nb.read_text())["cells"]):
            if cell["cell_type"] == "code":
                found += [f"{nb.name} cell {i}: {n}" for n in spelled_file_names("".join(cell["source"]))]
    return found


def test_the_file_names_are_the_owners():
    assert {"config.json", "metrics.jsonl", "summary.json", "cold_start_eval.json", "study.json",
            "study_record.json", "environment.json", "diverged.json", "study_wall.json"} <= set(FILE_NAMES)


def test_no_chapter_spells_a_run_or_study_file_name():
    assert chapters_spelling_file_names(ROOT / "book") == []


def test_a_chapter_reading_a_file_by_name_is_noticed(tmp_path):
    book = tmp_path / "book"
    book.mkdir()
    cell = {"cell_type": "code", "source": ['env = json.loads((study.path / "environment.json").read_text())\n',
                                            "rows = open(os.path.join(d, 'metrics.jsonl'))\n"]}
    prose = {"cell_type": "markdown", "source": ["Each run writes `config.json`."]}
    (book / "x.ipynb").write_text(json.dumps({"cells": [prose, cell]}))
    assert chapters_spelling_file_names(book) == ["x.ipynb cell 1: environment.json", "x.ipynb cell 1: metrics.jsonl"]
    assert spelled_file_names('print("checked: config.json saved")') == []  # a message names it, reads nothing


def _heavy_after_reading_results(package_parent: pathlib.Path) -> list[str]:
    code = ("import sys\nfrom sapo_lab.evidence.results import load_study, study_names\n"
            "root = sys.argv[1]; s = load_study(study_names(root)[0], root); r = s.runs[0]\n"
            "r.config, r.summary, r.cold_start_eval, r.rows, s.environment, s.declaration")
    return heavy_modules_after(code, ("torch", "pydantic", "transformers"), package_parent, str(results_root()))


def test_reading_results_imports_neither_torch_nor_pydantic(tmp_path):
    """``import sapo_lab.evidence.results`` and every typed reader: no torch, no pydantic. The planted copy (the
    run folder importing the config and the checkpoints again) shows the check can fail."""
    assert _heavy_after_reading_results(ROOT) == []
    shutil.copytree(PACKAGE, tmp_path / "sapo_lab", ignore=shutil.ignore_patterns("__pycache__"))
    planted = tmp_path / "sapo_lab" / "runs" / "run_folder.py"
    planted.write_text(planted.read_text() + "\nfrom .config import PRESETS  # noqa\n"
                       "from .checkpoint import CHECKPOINT_FILES  # noqa\n")
    assert {"torch", "pydantic"} <= set(_heavy_after_reading_results(tmp_path))


def test_the_typed_readers_return_the_files_contents():
    """Catches a reader pointing at the wrong file (the run's summary for the study's, the cold start's for the run's)."""
    name = study_names()[0]
    study = load_study(name)
    path = results_root() / name
    run = study.runs[0]
    raw = {n: json.loads((run.path / n).read_text()) for n in ("config.json", "summary.json", "cold_start_eval.json",
                                                              "study_record.json")}
    assert (run.config, run.summary, run.cold_start_eval, run.record) == (
        raw["config.json"], raw["summary.json"], raw["cold_start_eval.json"], raw["study_record.json"])
    assert study.declaration == json.loads((path / "study.json").read_text())
    assert study.environment == json.loads((path / "environment.json").read_text())
    assert study.summary == json.loads((path / "summary.json").read_text())
    assert study.run(run.run_id) is run
    with pytest.raises(KeyError, match="no finished run"):
        study.run("no_such_run")
    assert name in study_names() and all((results_root() / n / "study.json").is_file() for n in study_names())


def test_a_study_run_folder_is_a_run_not_a_users_folder(tmp_path):
    """The run-folder guard knows the files a study writes beside a run's: catches them counted as foreign
    (``train --overwrite`` would then keep a stale record, and a plain restart refuse the folder)."""
    d = tmp_path / "run"
    d.mkdir()
    for n in ("metrics.jsonl", *study_folder.STUDY_RUN_FILES):
        (d / n).write_text("")
    assert classify(str(d)).foreign == []
    (d / "notes.txt").write_text("mine")
    assert classify(str(d)).foreign == ["notes.txt"]

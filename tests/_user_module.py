"""A user's loss module for the conformance command-line tests: written into a test's folder and importable
as ``NAME:FUNCTION``, as a user's own file would be. Imported as ``from _user_module import ...``."""

import sys

from sapo_lab.cli import main as cli_main


def install_user_module(tmp_path, monkeypatch, name: str, source: str):
    """Write ``source`` as ``name.py`` in ``tmp_path``, make it the working folder and importable; a module of that
    name imported by another test is dropped first (it is not this one)."""
    monkeypatch.delitem(sys.modules, name, raising=False)
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def run_conformance(argv, capsys):
    """``python -m sapo_lab conformance ARGV`` in process: ``(exit status, stdout, stderr)``."""
    code = cli_main(["conformance", *argv])
    out, err = capsys.readouterr()
    return code, out, err

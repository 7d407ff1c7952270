"""Every hyperparameter is documented once, where it is declared; every public function says what it does."""

import ast
import dataclasses
import importlib
import inspect
import pkgutil
from pathlib import Path

import sapo_lab
from sapo_lab.runs import config

CONFIG_SOURCE = Path(config.__file__).read_text().splitlines()


def _config_dataclasses():
    return [obj for _, obj in inspect.getmembers(config, inspect.isclass)
            if dataclasses.is_dataclass(obj) and obj.__module__ == config.__name__]


def test_every_config_field_has_its_comment_on_the_declaring_line():
    # catches a new hyperparameter added without a word on what it does or which unit it takes
    undocumented = []
    for cls in _config_dataclasses():
        first = inspect.getsourcelines(cls)[1]
        body = CONFIG_SOURCE[first - 1: first - 1 + len(inspect.getsource(cls).splitlines())]
        for f in dataclasses.fields(cls):
            index = next((i for i, s in enumerate(body) if s.strip().startswith(f"{f.name}:")), None)
            assert index is not None, f"{cls.__name__}.{f.name} not found in its class body"
            commented = "#" in body[index] or body[index - 1].strip().startswith("#")  # or a comment block above
            nested = isinstance(f.type, str) and f.type.endswith("Config")
            if not commented and not nested:
                undocumented.append(f"{cls.__name__}.{f.name}")
    assert not undocumented, f"config fields without a comment: {undocumented}"


def _public_functions():
    for info in pkgutil.walk_packages(sapo_lab.__path__, "sapo_lab."):
        if info.name.startswith("sapo_lab.integrations") or info.name.endswith("__main__"):
            continue  # needs the trl extra; tests/test_trl_*.py cover it
        module = importlib.import_module(info.name)
        tree = ast.parse(Path(module.__file__).read_text())
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.ClassDef) and not node.name.startswith("_"):
                yield info.name, node


def test_every_public_function_and_class_has_a_docstring():
    # catches a public helper that a reader of the package would have to reverse-engineer
    missing = [f"{mod}.{node.name}" for mod, node in _public_functions() if not ast.get_docstring(node)]
    assert not missing, f"public names without a docstring: {missing}"

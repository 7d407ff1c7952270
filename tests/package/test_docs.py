"""Every hyperparameter is documented once, where it is declared; every public function says what it does."""

import ast
import dataclasses
import importlib
import inspect
import pkgutil
import typing
from pathlib import Path

import sapo_lab
from sapo_lab.runs import config


def _config_dataclasses():
    return [obj for _, obj in inspect.getmembers(config, inspect.isclass)
            if dataclasses.is_dataclass(obj) and obj.__module__ == config.__name__]


def test_every_config_field_has_its_description_where_it_is_declared():
    # catches a new hyperparameter added without a word on what it does or which unit it takes (the help
    # lists the description, sapo_lab.runs.config_keys)
    undocumented = []
    for cls in _config_dataclasses():
        hints = typing.get_type_hints(cls)
        for name, info in cls.__pydantic_fields__.items():
            nested = dataclasses.is_dataclass(hints[name])
            if not nested and len((info.description or "").split()) < 2:
                undocumented.append(f"{cls.__name__}.{name}")
    assert not undocumented, f"config fields without a description: {undocumented}"


def _public_functions():
    for info in pkgutil.walk_packages(sapo_lab.__path__, "sapo_lab."):
        if info.name.startswith("sapo_lab.integrations") or info.name.endswith("__main__"):
            continue  # needs the trl extra; tests/integrations/test_trl_*.py cover it
        module = importlib.import_module(info.name)
        tree = ast.parse(Path(module.__file__).read_text())
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.ClassDef) and not node.name.startswith("_"):
                yield info.name, node


def test_every_public_function_and_class_has_a_docstring():
    # catches a public helper that a reader of the package would have to reverse-engineer
    missing = [f"{mod}.{node.name}" for mod, node in _public_functions() if not ast.get_docstring(node)]
    assert not missing, f"public names without a docstring: {missing}"

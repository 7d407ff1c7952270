"""The book's coded exercises as the grading test sees them: solution, check and registered wrong answers.

A coded exercise is a code cell tagged ``solution``; its check is the next cell tagged ``check`` before the
next ``exercise-start``; its wrong answers are the solution cell's ``wrong_answers`` metadata, each a
plausible mistake (``mistake``), a replacement for the solution cell (``source``) and, optionally, a piece of the
message the check must print on it (``message``: the mistake's name); its ``right_answers`` are other correct
solutions (``why``: how it differs, ``source``), which the check must accept.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"


@dataclass
class Exercise:
    notebook: str
    label: str
    solution: int  # cell index
    check: int | None
    wrong: list[dict] = field(default_factory=list)
    right: list[dict] = field(default_factory=list)


def _source(cell) -> str:
    return "".join(cell["source"])


def exercises(path: Path) -> list[Exercise]:
    cells = json.loads(path.read_text())["cells"]
    found, label = [], None
    for i, cell in enumerate(cells):
        text = _source(cell)
        if cell["cell_type"] == "markdown" and "exercise-start" in text:
            label = text.split(":label:")[1].split()[0]
        tags = cell["metadata"].get("tags", [])
        if cell["cell_type"] == "code" and "solution" in tags:
            check = None
            for j in range(i + 1, len(cells)):
                if "exercise-start" in _source(cells[j]):
                    break
                if "check" in cells[j]["metadata"].get("tags", []):
                    check = j
                    break
            found.append(Exercise(path.name, label, i, check, cell["metadata"].get("wrong_answers", []),
                                  cell["metadata"].get("right_answers", [])))
    return found


def notebooks_with_exercises() -> list[Path]:
    return [p for p in sorted(BOOK.glob("*.ipynb")) if exercises(p)]


# The project's convention: a ``hide-input`` cell only formats, plots or asserts. The grading test leaves such a
# cell out when the syntax tree confirms it: no later source reads a name it binds, no function the notebook
# defined reads one either, and it changes no object or setting that later cells see (below).
# A call by one of these names draws random numbers, writes, or changes a global setting.
STATEFUL_NAME = re.compile(r"(^|_)(seed|manual_seed|rand\w*|shuffle|permutation|normal|multinomial|bernoulli|"
                           r"choice|sample|write\w*|save\w*|mkdir|remove|unlink|chdir|setattr|set_default\w*|"
                           r"set_num_threads|use_deterministic\w*)$")
# A method by one of these names changes its object (in place), when the object is one a later cell sees.
MUTATING_METHOD = re.compile(r"^(append|extend|insert|pop|popitem|update|clear|add|remove|discard|setdefault|sort|"
                             r"reverse|train|eval|step|backward|zero_grad|load_state_dict|\w+_)$")
# Names through which code can reach any global: a source using one may read what a skipped cell bound.
INTROSPECTION = {"globals", "locals", "vars", "eval", "exec", "__builtins__"}


def _parse(source: str) -> ast.Module | None:
    """A cell's syntax tree, IPython's magics (``%pip ...``) read as the calls IPython runs for them."""
    from IPython.core.inputtransformer2 import TransformerManager

    try:
        return ast.parse(TransformerManager().transform_cell(source))
    except SyntaxError:  # not Python even for IPython: never judged skippable
        return None


def _bound(tree: ast.AST) -> set[str]:
    """The global names a source binds: assigned, imported, defined, or a loop's or a ``with``'s target."""
    return {sym.get_name() for sym in _symbols(tree).get_symbols() if sym.is_assigned() or sym.is_imported()}


def _symbols(tree: ast.AST):
    import symtable

    return symtable.symtable(ast.unparse(tree), "<cell>", "exec")


def _global_reads(table) -> set[str]:
    """The global names a scope and the functions, classes and comprehensions inside it read."""
    reads = {sym.get_name() for sym in table.get_symbols() if sym.is_referenced()
             and (table.get_type() == "module" or sym.is_global())}
    for child in table.get_children():
        reads |= _global_reads(child)
    return reads


def _locals(table) -> set[str]:
    """The names the functions and comprehensions inside a scope assign (not their parameters)."""
    names = set()
    for child in table.get_children():
        names |= {sym.get_name() for sym in child.get_symbols() if sym.is_assigned() and not sym.is_parameter()}
        names |= _locals(child)
    return names


def _reads_in_bodies(tree: ast.AST) -> set[str]:
    """Globals read inside the functions a source defines: read again whenever a later cell calls them."""
    return set().union(set(), *(_global_reads(child) for child in _symbols(tree).get_children()))


def _reads_before_rebinding(statements: list[ast.stmt], names: set[str]) -> tuple[set[str], set[str]]:
    """Of ``names``, (those the statements read before binding them again, those they surely bind again first).

    Statements run in order; an assignment, import or definition rebinds its targets after evaluating its
    right-hand side. A ``for`` loop's body is followed inside with its target bound, but nothing it binds
    counts as bound after the loop (it may run no time). Any other statement counts every name it reads."""
    read, rebound = set(), set()
    for statement in statements:
        pending = names - read - rebound
        if not pending:
            break
        if isinstance(statement, ast.For):
            read |= _reads(ast.Expr(statement.iter)) & pending
            inside = pending - {n.id for n in ast.walk(statement.target) if isinstance(n, ast.Name)}
            read |= _reads_before_rebinding(statement.body + statement.orelse, inside)[0]
            continue
        read |= _reads(statement) & pending
        plain = isinstance(statement, ast.Assign | ast.Import | ast.ImportFrom | ast.FunctionDef | ast.ClassDef)
        plain = plain or (isinstance(statement, ast.AnnAssign) and statement.value is not None)
        targets = getattr(statement, "targets", [getattr(statement, "target", None)])
        if plain and all(isinstance(t, ast.Name | ast.Tuple | ast.List | type(None)) for t in targets):
            rebound |= (_bound(ast.Module(body=[statement], type_ignores=[])) & pending) - read
    return read, rebound


def _reads(statement: ast.stmt) -> set[str]:
    return _global_reads(_symbols(ast.Module(body=[statement], type_ignores=[])))


def _changes_outside_state(tree: ast.Module, own: set[str]) -> bool:
    """Whether a cell may change an object or setting later cells see: an attribute or item of an object it did
    not make assigned or deleted, a ``global`` statement, an in-place method called on such an object
    (``rows.append``, ``model.eval``), or a call that draws random numbers, writes or sets something global."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Global | ast.Nonlocal):
            return True
        if isinstance(node, ast.Attribute | ast.Subscript) and isinstance(node.ctx, ast.Store | ast.Del):
            if _root(node) not in own:
                return True
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else ast.unparse(node.func)
            if STATEFUL_NAME.search(name) or "random" in ast.unparse(node.func).split("."):
                return True
            if isinstance(node.func, ast.Attribute) and MUTATING_METHOD.match(name) \
                    and _root(node.func.value) not in own:
                return True
    return False


def _root(node: ast.AST) -> str | None:
    """The name an attribute or item chain starts from (``ax`` of ``ax.spines["top"]``); None for a literal
    or a call's result, a new object."""
    while isinstance(node, ast.Attribute | ast.Subscript):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def display_only_cells(path: Path, stubs: dict[int, str] | None = None) -> set[int]:
    """The ``hide-input`` cells before a notebook's last check that only show something, by the rules above:
    executing them cannot change what a check sees, so the grading test leaves them out (the book build
    still runs them). ``stubs`` adds the student's stub of each solution cell (by index) to what the test
    executes before that cell, beside its registered right and wrong answers."""
    cells = json.loads(path.read_text())["cells"]
    found = [e for e in exercises(path) if e.check is not None]
    if not found:
        return set()
    last = max(e.check for e in found)
    graded = {e.solution for e in found} | {e.check for e in found}
    answers = {e.solution: [a["source"] for a in e.right + e.wrong] for e in found}
    for i, stub in (stubs or {}).items():
        answers.setdefault(i, []).append(stub)
    order = []  # every source the test executes, in order: a solution cell's answers and checks come first
    for e in found:
        answers[e.solution].append(_source(cells[e.check]))
    for i, cell in enumerate(cells[: last + 1]):
        if cell["cell_type"] == "code":
            order += [(i, _parse(a)) for a in answers.get(i, [])] + [(i, _parse(_source(cell)))]
    if any(tree is None or _global_reads(_symbols(tree)) & INTROSPECTION for _, tree in order):
        return set()
    return {i for i, cell in enumerate(cells[:last]) if cell["cell_type"] == "code" and i not in graded
            and "hide-input" in cell["metadata"].get("tags", []) and _only_shows(i, order)}


def _only_shows(index: int, order: list) -> bool:
    tree = [t for i, t in order if i == index][-1]
    own = _bound(tree)
    if _changes_outside_state(tree, own | _locals(_symbols(tree))):
        return False
    if own & set().union(*(_reads_in_bodies(t) for i, t in order if i < index)):
        return False  # a function defined earlier reads the name when a later cell calls it
    pending = set(own)
    for _, later in (item for item in order if item[0] > index):
        read, rebound = _reads_before_rebinding(later.body, pending)
        if read:
            return False
        pending -= rebound
    return True

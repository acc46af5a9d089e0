"""The house rules that a machine can check: ruff and mypy pass, modules stay small, no private names cross modules,
and the state package reads envs' attributes, not their ``__dict__``.

Run by ``.ci/run`` with the rest of the suite (the README's test command).
"""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "plan_parallel"
MAX_LINES = 450  # STYLE.md: "~400 lines at most"; past this a module is doing two jobs
# Known to be over, with the reason; the list only shrinks.
OVERSIZED: dict[str, str] = {}


def run(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *cmd], cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.mark.timeout(120)
def test_ruff_finds_nothing() -> None:
    r = run("ruff", "check", "plan_parallel", "tests")
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


@pytest.mark.timeout(400)
def test_mypy_finds_nothing() -> None:
    r = run("mypy")  # configured in pyproject.toml: the plan_parallel package
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


def test_modules_stay_small() -> None:
    big = {}
    for path in PACKAGE.rglob("*.py"):
        n = len(path.read_text().splitlines())
        if n > MAX_LINES and path.name not in OVERSIZED:
            big[str(path.relative_to(ROOT))] = n
    assert not big, f"modules over {MAX_LINES} lines (split them by job): {big}"


def private_imports(path: Path) -> list[str]:
    """``from plan_parallel... import _name`` and ``plan_parallel_module._name`` in one file."""
    tree = ast.parse(path.read_text())
    found = []
    modules = set()  # names bound to plan_parallel modules in this file
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("plan_parallel"):
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"{path.name}:{node.lineno} imports {alias.name} from {node.module}")
                modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("plan_parallel"):
                    modules.add(alias.asname or alias.name.split(".")[0])
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                and isinstance(node.value, ast.Name) and node.value.id in modules):
            found.append(f"{path.name}:{node.lineno} uses {node.value.id}.{node.attr}")
    return found


def test_no_private_names_cross_modules() -> None:
    found = [hit for path in PACKAGE.rglob("*.py") for hit in private_imports(path)]
    assert not found, "private names used across modules:\n" + "\n".join(found)


# Where the state package asks an object for its __dict__ on purpose: the pickle fallback's state is the
# unwrapped env's dict, an unknown wrapper's state is the plain entries of its dict, core.py lists
# numpy's bit generators from its module's dict, and the restore probe names the attributes a restore left
# behind (on the envs a check builds and drops).
DICT_READERS = {("generic.py", "GenericPickleAdapter"), ("wrappers.py", "_generic_keys"), ("wrappers.py", "_generic_codec"),
                ("core.py", "<module>"), ("restore_probe.py", "attribute_snapshot")}


def dict_reads(path: Path) -> list[tuple[str, int]]:
    """``x.__dict__`` and ``vars(x)`` in one file, each with the top-level function or class it is in."""
    found = []
    for top in ast.parse(path.read_text()).body:
        name = getattr(top, "name", "<module>")
        for node in ast.walk(top):
            if (isinstance(node, ast.Attribute) and node.attr == "__dict__") or (
                    isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "vars"):
                found.append((name, node.lineno))
    return found


def test_the_state_package_reads_envs_attributes_not_their_dict() -> None:
    """On CPython 3.11 an object whose ``__dict__`` was asked for reads its attributes slower from then on,
    its own methods included (CartPole's step: 9.9 -> 11.1 us when the classic-control adapter read its dict)."""
    bad = [f"{path.name}:{line} in {name}" for path in sorted((PACKAGE / "state").rglob("*.py"))
           for name, line in dict_reads(path) if (path.name, name) not in DICT_READERS]
    assert not bad, f"getattr/setattr, not __dict__: {bad}"


# The docs' "The code" (docs/guides/code.md): each tier imports only from the tiers before it (and its own).
TIERS = [("errors", "interrupts"), ("state",), ("results", "inputs", "action_inputs", "factory"), ("env",), ("wire",),
         ("workers",), ("batch",), ("build",), ("vector",), ("planners",), ("cli",)]
# check_clonable builds an env from an id with the factory: lazily, inside the function.
LATER_IMPORTS = {("state/check.py", "factory")}


def imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, module)`` of each module a file imports: ``import a.b`` names ``a.b``, ``from a.b import c`` names ``a.b``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            found.append((node.lineno, node.module or ""))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
    return found


def test_each_package_imports_only_from_the_ones_before_it() -> None:
    tier = {name: k for k, names in enumerate(TIERS) for name in names}
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.name == "__init__.py" and len(rel.parts) == 1:
            continue  # the package face imports from everything
        mine = tier[rel.parts[0].removesuffix(".py")]
        for line, name in imported_modules(ast.parse(path.read_text())):
            parts = name.split(".")
            if parts[0] != "plan_parallel" or len(parts) < 2:
                continue
            if tier[parts[1]] > mine and (rel.as_posix(), parts[1]) not in LATER_IMPORTS:
                bad.append(f"{rel}:{line} imports {name}")
    assert not bad, "imports from a later package (docs/guides/code.md):\n" + "\n".join(bad)


def test_package_faces_only_re_export_and_only_the_cli_imports_the_top_one() -> None:
    """STYLE: a package face (``__init__.py``) only re-exports (the top one also defers one import:
    ``make_vec`` loads the vector env when called); inside the package only the
    command line, a user of the public API, imports ``plan_parallel`` itself."""
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        tree = ast.parse(path.read_text())
        if rel.name == "__init__.py" and len(rel.parts) > 1:
            bad += [f"{rel}:{n.lineno} defines {n.name}" for n in tree.body
                    if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
        if rel.parts[0] != "cli" and len(rel.parts) > 1:
            bad += [f"{rel}:{line} imports the package face" for line, name in imported_modules(tree)
                    if name == "plan_parallel"]
    assert not bad, "\n".join(bad)

"""The public API: what each public module exports, and that nothing outside the library
(these tests, the benchmarks, the examples, the plugin in ``strategies/``) leans on the rest.

A public module is ``ctxcompact`` or any module under it whose dotted path has no part that
starts with ``_``. Its ``__all__`` is the promise: every public name it defines, plus what it
re-exports (a package facade re-exports its private modules' names by listing them), sorted as
ruff sorts it (RUF022), each importable. Tests that must look inside live in
``tests/internals/``, each saying why.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import itertools
import pkgutil
import re
import sys
import types
from pathlib import Path
from types import ModuleType
from typing import TypeVar

import pytest

import ctxcompact
from ctxcompact.exceptions import MissingDependencyError

ROOT = Path(__file__).resolve().parents[1]


def public_modules() -> list[str]:
    """``ctxcompact`` and every module under it with no ``_`` part, by name."""
    found = ["ctxcompact"]
    for info in pkgutil.walk_packages(ctxcompact.__path__, "ctxcompact."):
        if not any(part.startswith("_") for part in info.name.split(".")[1:]):
            found.append(info.name)
    return sorted(found)


def _import(name: str) -> ModuleType:
    """The public module ``name``; skipped (with the extra it needs) when an optional
    dependency is absent, as pydantic-ai is on Python 3.10."""
    try:
        return importlib.import_module(name)
    except MissingDependencyError as exc:
        pytest.skip(str(exc))


def _is_type_checking(node: ast.stmt) -> bool:
    return isinstance(node, ast.If) and (
        (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
        or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING")
    )


def _top_level(body: list[ast.stmt]) -> list[ast.stmt]:
    """Module-level statements, through ``try``/``if`` blocks but not ``if TYPE_CHECKING``."""
    out: list[ast.stmt] = []
    for node in body:
        if _is_type_checking(node):
            continue
        if isinstance(node, ast.If):
            out += _top_level(node.body) + _top_level(node.orelse)
        elif isinstance(node, ast.Try):  # not the handlers: what they bind is transient
            out += _top_level(node.body) + _top_level(node.orelse) + _top_level(node.finalbody)
        else:
            out.append(node)
    return out


def exported_names(module: ModuleType) -> set[str]:
    """The public names ``module`` defines at module level (functions, classes, constants).

    What a module imports is its own business (PEP 8; mypy's ``no_implicit_reexport``) unless
    its ``__all__`` lists it, as the package facades do. A module-level ``logger`` is a logger,
    not an API (logging's convention), and a ``TypeVar`` serves the module's own signatures.
    """
    tree = ast.parse(inspect.getsource(module))
    names: set[str] = set()
    for node in _top_level(tree.body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names.add(target.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    public = {n for n in names if not n.startswith("_") and n != "logger"}
    # A module-level TypeVar is typing plumbing for its own signatures, not an export.
    return {n for n in public if not isinstance(getattr(module, n, None), TypeVar)}


def ruff_order(name: str) -> tuple[int, list[object]]:
    """RUF022's isort-style order: SCREAMING_CASE, then CamelCase, then the rest; each
    group in natural order (digits compared as numbers)."""
    group = 0 if len(name) > 1 and name.isupper() else 1 if name[:1].isupper() else 2
    natural = [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]
    return group, natural


@pytest.mark.parametrize("name", public_modules())
def test_each_public_module_lists_exactly_what_it_exports(name: str) -> None:
    module = _import(name)
    listed = getattr(module, "__all__", None)
    assert listed is not None, f"{name} has no __all__"
    assert len(set(listed)) == len(listed), f"{name}.__all__ repeats a name"
    assert list(listed) == sorted(listed, key=ruff_order), f"{name}.__all__ is not sorted"
    for public in listed:  # importable, lazily loaded ones included
        assert getattr(module, public, None) is not None, f"{name}.{public} cannot be imported"
    omitted = sorted(exported_names(module) - set(listed))
    assert omitted == [], f"{name} defines public names its __all__ omits"


def test_the_export_check_sees_definitions_only() -> None:
    testing = importlib.import_module("ctxcompact.testing")
    assert "ScriptedLLM" in exported_names(testing)
    assert "Message" not in exported_names(testing)  # imported for its own use
    kit = importlib.import_module("ctxcompact.kit")
    assert exported_names(kit) == set()  # a facade: it lists its private modules' names
    assert "TYPE_CHECKING" not in exported_names(ctxcompact)
    assert sorted(["b", "Camel", "SCREAM", "a10", "a9"], key=ruff_order) == [
        "SCREAM",
        "Camel",
        "a9",
        "a10",
        "b",
    ]


def attribute_docstrings(module: ModuleType) -> set[str]:
    """Names assigned at ``module``'s top level with a string right after (PEP 257)."""
    body = ast.parse(inspect.getsource(module)).body
    documented = set()
    for node, after in itertools.pairwise(body):
        if not (
            isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            continue
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AnnAssign):
            targets = [node.target]
        documented |= {t.id for t in targets if isinstance(t, ast.Name)}
    return documented


def _defining_modules(value: object, name: str) -> list[ModuleType]:
    """The ctxcompact modules that bind ``name`` to ``value`` (a constant's possible homes)."""
    return [
        module
        for key, module in sorted(sys.modules.items())
        if key.startswith("ctxcompact") and getattr(module, name, None) is value
    ]


@pytest.mark.parametrize("name", public_modules())
def test_every_public_name_is_documented(name: str) -> None:
    """Classes and functions by their docstring; constants by the string after them."""
    module = _import(name)
    undocumented = []
    for public in module.__all__:
        if public.startswith("__"):
            continue
        value = getattr(module, public)
        # A generic alias (``Callable[...]``) is a constant, though Python 3.10's isclass
        # says it is a class.
        if (inspect.isclass(value) and not isinstance(value, types.GenericAlias)) or (
            inspect.isroutine(value)
        ):
            if not (value.__doc__ or "").strip():
                undocumented.append(public)
        elif not any(
            public in attribute_docstrings(home) for home in _defining_modules(value, public)
        ):
            undocumented.append(public)
    assert undocumented == []


# -- outsiders import public modules only ---------------------------------------------------------


def private_imports(path: Path, *, root: Path = ROOT) -> list[str]:
    """The private ctxcompact modules ``path`` imports: ``ctxcompact._x``, ``ctxcompact.a._y``,
    or ``from ctxcompact(.a) import _x``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "ctxcompact" and any(p.startswith("_") for p in parts[1:]):
                if parts[-1] in ("__version__",):
                    continue
                found.append(f"{path.relative_to(root)}:{node.lineno}: {name}")
                break
    return found


def outsiders() -> list[Path]:
    """Every Python file outside the library that must use its public API only."""
    files = [
        *(ROOT / "tests").rglob("*.py"),
        *(ROOT / "benchmarks").rglob("*.py"),
        *(ROOT / "examples").rglob("*.py"),
        *(ROOT / "strategies").rglob("*.py"),
    ]
    internals = ROOT / "tests" / "internals"
    return sorted(f for f in files if internals not in f.parents and ".venv" not in f.parts)


def test_nothing_outside_tests_internals_imports_a_private_module() -> None:
    files = outsiders()
    names = {f.name for f in files}
    assert {"_masking.py", "bench_replay.py", "quickstart.py", "gen.py"} <= names
    assert "test_redos.py" not in names  # white-box: tests/internals
    assert [hit for f in files for hit in private_imports(f)] == []


def test_the_private_import_finder_finds_them(tmp_path: Path) -> None:
    sample = tmp_path / "plugin.py"
    sample.write_text(
        "import ctxcompact._history.messages\n"
        "from ctxcompact.strategies._shared import with_content\n"
        "from ctxcompact.cli import _replay\n"
        "from ctxcompact import _wiring\n"
        "from ctxcompact.kit import with_content as w\n"
        "from ctxcompact import Message, __version__\n",
        encoding="utf-8",
    )
    hits = private_imports(sample, root=tmp_path)
    assert [h.split(": ")[1] for h in hits] == [
        "ctxcompact._history.messages",
        "ctxcompact.strategies._shared",
        "ctxcompact.cli._replay",
        "ctxcompact._wiring",
    ]


def test_every_white_box_test_says_why_it_looks_inside() -> None:
    for path in sorted((ROOT / "tests" / "internals").glob("*.py")):
        if path.name == "__init__.py":
            continue
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
        assert doc, f"{path.name} has no docstring"
        assert "white-box" in doc.lower() or "inside" in doc.lower(), path.name

"""griffe extensions: the docstrings render as they read, examples and lazy exports included.

ctxcompact's docstrings follow Google style with one ``Example:`` section each (STYLE.md).
griffe's Google parser knows the plural, ``Examples:``, as the section whose ``>>>`` lines
are code; the singular would be an admonition of plain text, where a doctest's output such as
``['a', 'b']`` reads as a Markdown link. Renaming the section when the docstring is loaded
keeps the sources as they are.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from typing import Any

import griffe

_SINGULAR = re.compile(r"^(\s*)Example:[ \t]*$", re.MULTILINE)
# Sphinx roles (:class:`~ctxcompact.LLM`) read as code; "~" shows the last part only.
_ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|exc|obj|const):`(~?)([^`]+)`")
# reStructuredText's "::" ends the line before an indented literal block.
_LITERAL = re.compile(r"^(?P<indent>[ \t]*)(?P<text>.*?)::[ \t]*$")


def _role(match: re.Match[str]) -> str:
    short, target = match[1], match[2]
    return f"`{target.rsplit('.', 1)[-1] if short else target}`"


def _literal_blocks(text: str) -> str:
    """reStructuredText literal blocks (``Text::`` then an indented block) as fenced code."""
    lines = text.split("\n")
    out: list[str] = []
    k = 0
    while k < len(lines):
        match = _LITERAL.match(lines[k])
        if match is None:
            out.append(lines[k])
            k += 1
            continue
        indent, before = match["indent"], match["text"]
        if before.strip():
            out.append(f"{indent}{before}:")
        k += 1
        body: list[str] = []
        while k < len(lines) and (not lines[k].strip() or _indent(lines[k]) > len(indent)):
            body.append(lines[k])
            k += 1
        while body and not body[-1].strip():
            body.pop()
        while body and not body[0].strip():
            body.pop(0)
        code = [line for line in body if line.strip()]
        cut = min((_indent(line) for line in code), default=0)
        out += ["", f"{indent}```python"]
        out += [f"{indent}{line[cut:]}" if line.strip() else "" for line in body]
        out += [f"{indent}```", ""]
    return "\n".join(out)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def markdown_docstring(text: str) -> str:
    r"""The docstring as griffe's Google parser and Markdown read it best.

    Example:
        >>> markdown_docstring("See :class:`~ctxcompact.LLM`::\n\n    x = 1\n\nExample:\n    >>> 1")
        'See `LLM`:\n\n```python\nx = 1\n```\n\nExamples:\n    >>> 1'
    """
    text = _SINGULAR.sub(r"\1Examples:", text)
    text = _ROLE.sub(_role, text)
    return _literal_blocks(text)


class ExampleSections(griffe.Extension):
    """Rename ``Example:`` to ``Examples:``, Sphinx roles to code, as objects are loaded."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown_docstring(obj.docstring.value)


class LazyExports(griffe.Extension):
    """Document the names a module loads on first use (its ``_LAZY`` table) as its own.

    ``ctxcompact.proxy`` lists ``Rewriter`` and ``parse_body`` in ``__all__`` but imports them
    in ``__getattr__`` (they need the ``proxy`` extra), so a static reader sees no such
    members. The module's ``_LAZY`` dictionary (name -> relative module) says where each is
    defined; each becomes an alias, rendered with its docstring like any re-export.
    """

    def on_module(self, *, mod: griffe.Module, **kwargs: Any) -> None:
        table = mod.members.get("_LAZY")
        if table is None or not isinstance(table, griffe.Attribute) or table.value is None:
            return
        for name, relative in ast.literal_eval(str(table.value)).items():
            if name not in mod.members:
                target = f"{mod.path}.{relative.lstrip('.')}.{name}"
                mod.set_member(name, griffe.Alias(name, target, parent=mod))


class RuntimeTables(griffe.Extension):
    """Document the config tables that are built when ``ctxcompact`` is imported.

    ``Schema1Config``, ``TruncationConfig`` and ``ContextGuardConfig`` are pydantic models
    made from the constructors of the strategies they turn on; a static reader sees only an
    assignment. Each gets its runtime docstring and the list of its keys with their defaults.
    """

    def on_module(self, *, mod: griffe.Module, **kwargs: Any) -> None:
        if mod.path != "ctxcompact._config.config":
            return
        runtime = importlib.import_module(mod.path)
        for name, member in mod.members.items():
            value = getattr(runtime, name, None)
            fields = getattr(value, "model_fields", None)
            if member.is_alias or not member.is_attribute or fields is None:
                continue
            keys = "\n".join(
                f"- `{key}` (default `{info.default!r}`)" for key, info in fields.items()
            )
            text = f"{inspect.cleandoc(value.__doc__ or '')}\n\nKeys, all optional:\n\n{keys}"
            member.docstring = griffe.Docstring(markdown_docstring(text), parent=member)

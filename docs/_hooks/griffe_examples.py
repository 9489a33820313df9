"""griffe extensions: the docstrings render as they read, examples and lazy exports included.

ctxcompact's docstrings follow Google style with one ``Example:`` section each (STYLE.md).
griffe's Google parser knows the plural, ``Examples:``, as the section whose ``>>>`` lines
are code; the singular would be an admonition of plain text, where a doctest's output such as
``['a', 'b']`` reads as a Markdown link. Renaming the section when the docstring is loaded
keeps the sources as they are.
"""

from __future__ import annotations

import ast
import re
from typing import Any

import griffe

_SINGULAR = re.compile(r"^(\s*)Example:[ \t]*$", re.MULTILINE)
# Sphinx roles (:class:`~ctxcompact.LLM`) read as code; "~" shows the last part only.
_ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|exc|obj|const):`(~?)([^`]+)`")
# reStructuredText's "::" before a literal block: Markdown needs none.
_LITERAL_ALONE = re.compile(r"^[ \t]*::[ \t]*$", re.MULTILINE)
_LITERAL_END = re.compile(r"(?<=\S)::[ \t]*$", re.MULTILINE)


def _role(match: re.Match[str]) -> str:
    short, target = match[1], match[2]
    return f"`{target.rsplit('.', 1)[-1] if short else target}`"


def markdown_docstring(text: str) -> str:
    r"""The docstring as griffe's Google parser and Markdown read it best.

    Example:
        >>> markdown_docstring("See :class:`~ctxcompact.LLM`::\n\nExample:\n    >>> 1")
        'See `LLM`:\n\nExamples:\n    >>> 1'
    """
    text = _SINGULAR.sub(r"\1Examples:", text)
    text = _ROLE.sub(_role, text)
    text = _LITERAL_ALONE.sub("", text)
    return _LITERAL_END.sub(":", text)


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

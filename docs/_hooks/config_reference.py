"""The configuration page's list of every TOML key, generated when the site is built.

Keys, types, defaults and allowed ranges come from the pydantic models the file is validated
with (:class:`ctxcompact.Config` and its tables), so the page cannot drift from what
:func:`ctxcompact.load_config` accepts. What each key does comes from the comment above it in
``config.example.toml``, which ``tests/test_config.py`` already holds to documenting every
key. A key without a description fails the build, naming it.

An MkDocs hook (``hooks:`` in ``mkdocs.yml``): the marker ``<!-- config-reference -->`` in a
page is replaced by the tables. ``tests/test_docs_site.py`` checks the result.
"""

from __future__ import annotations

import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import annotated_types
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

if typing.TYPE_CHECKING:
    from pydantic.fields import FieldInfo

MARKER = "<!-- config-reference -->"
ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "config.example.toml"

# Tables whose keys are names the user chooses: shown with a placeholder in the heading.
_NAMED = {"pricing": "pricing.<name>"}

_HEADER = re.compile(r"^#?\s*\[([\w.]+)\]\s*$")
_KEY = re.compile(r"^#?\s*(\w+) = ")


@dataclass
class Key:
    """One key of one table, as the page shows it."""

    table: str
    name: str
    type: str
    default: str
    allowed: str
    doc: str


@dataclass
class Table:
    """One TOML table: its heading, what it is for, and its keys."""

    name: str
    doc: str
    keys: list[Key] = field(default_factory=list)


def example_comments(text: str) -> tuple[dict[str, str], dict[str, str]]:
    """The comment above each key (``table.key``) and each table in ``config.example.toml``.

    Commented-out keys (``# max_tokens = 4096``) and tables (``# [agent.llm]``) count: the
    example shows optional settings that way.
    """
    keys: dict[str, str] = {}
    tables: dict[str, str] = {}
    table = ""
    buffer: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        header = _HEADER.match(line)
        key = _KEY.match(line)
        if header:
            table = re.sub(r"^pricing\.\w+$", "pricing.<name>", header[1])
            tables.setdefault(table, " ".join(buffer))
            buffer = []
        elif key:
            name = f"{table}.{key[1]}" if table else key[1]
            keys.setdefault(name, " ".join(buffer))
            buffer = []
        elif line.startswith("#"):
            buffer.append(line.lstrip("#").strip())
        else:
            buffer = []
    return keys, tables


def _model_of(info: FieldInfo) -> type[BaseModel] | None:
    for candidate in (info.annotation, *typing.get_args(info.annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return " \\| ".join(f'`"{a}"`' if isinstance(a, str) else f"`{a}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        parts = [_type_name(a) for a in args if a is not type(None)]
        text = " \\| ".join(parts)
        return text + (" \\| none" if type(None) in args else "")
    if origin is not None:
        inner = ", ".join(_type_name(a) for a in args)
        return f"{getattr(origin, '__name__', str(origin))}[{inner}]"
    names = {str: "string", int: "integer", float: "float", bool: "boolean"}
    if annotation in names:
        return names[annotation]
    return getattr(annotation, "__name__", str(annotation))


def _default(info: FieldInfo) -> str:
    if info.default_factory is not None:
        value = info.default_factory()  # type: ignore[call-arg]
        return "empty" if not value else f"`{value!r}`"
    if info.default is PydanticUndefined:
        return "required"
    if info.default is None:
        return "none"
    if isinstance(info.default, bool):
        return f"`{str(info.default).lower()}`"
    if isinstance(info.default, str):
        return f'`"{info.default}"`'
    return f"`{info.default!r}`"


def _allowed(info: FieldInfo) -> str:
    bounds = []
    for meta in info.metadata:
        for kind, attr, sign in (
            (annotated_types.Ge, "ge", ">="),
            (annotated_types.Gt, "gt", ">"),
            (annotated_types.Le, "le", "<="),
            (annotated_types.Lt, "lt", "<"),
        ):
            if isinstance(meta, kind):
                bounds.append(f"{sign} {getattr(meta, attr)}")
        if isinstance(meta, annotated_types.MinLen) and meta.min_length:
            bounds.append("not empty")
    return ", ".join(bounds)


def config_tables() -> list[Table]:
    """Every table of :class:`ctxcompact.Config`, nested ones included, in the file's order."""
    from ctxcompact import Config

    key_docs, table_docs = example_comments(EXAMPLE.read_text(encoding="utf-8"))
    tables: list[Table] = []

    def walk(model: type[BaseModel], name: str) -> None:
        doc = table_docs.get(name) or (model.__doc__ or "").strip().split("\n\n")[0]
        table = Table(name, " ".join(doc.split()))
        tables.append(table)
        nested: list[tuple[type[BaseModel], str]] = []
        for key, info in model.model_fields.items():
            sub = _model_of(info)
            path = f"{name}.{key}" if name else key
            if sub is not None and typing.get_origin(info.annotation) is dict:
                nested.append((sub, _NAMED.get(path, f"{path}.<name>")))
                continue
            if path == "agent.llm.fallbacks":  # refused there: only the summarizer has them
                continue
            if sub is not None:
                nested.append((sub, path))
                continue
            # A key whose value is a table of its own ([compaction.params]) is described
            # above that table's header.
            described = key_docs.get(path) or table_docs.get(path) or info.description or ""
            # [agent.llm] and each of [compaction.llm]'s fallbacks: the keys of [compaction.llm]
            if name in ("agent.llm", "compaction.llm.fallbacks") and not described:
                described = key_docs.get(f"compaction.llm.{key}", "")
            if not described:
                raise ValueError(
                    f"config key {path!r} has no description: add a comment above it in "
                    "config.example.toml"
                )
            table.keys.append(
                Key(
                    name or "(top level)",
                    key,
                    _type_name(info.annotation),
                    _default(info),
                    _allowed(info),
                    " ".join(described.split()),
                )
            )
        for sub, path in nested:
            walk(sub, path)

    walk(Config, "")
    return tables


def _cell(text: str) -> str:
    """A comment of ``config.example.toml`` as a table cell: plain text, its code spans kept.

    Outside backticks, ``|`` would end the cell and ``[a][b]`` (``host[:port][/db]``) would be
    read as a link reference, which the strict build reports as a missing target.
    """
    parts = re.split(r"(`[^`]*`)", text)
    return "".join(
        part if part.startswith("`") else re.sub(r"([|\[\]])", r"\\\1", part) for part in parts
    )


def config_reference_markdown() -> str:
    """The Markdown that replaces :data:`MARKER`: one section per table, one row per key."""
    out: list[str] = []
    for table in config_tables():
        if not table.keys:
            continue
        title = "Top level" if not table.name else f"`[{table.name}]`"
        out += [f"### {title}", ""]
        if table.doc:
            out += [table.doc, ""]
        out += ["| key | type | default | allowed | what it does |", "|---|---|---|---|---|"]
        for key in table.keys:
            out.append(
                f"| `{key.name}` | {key.type} | {key.default} | {key.allowed} | {_cell(key.doc)} |"
            )
        out.append("")
    return "\n".join(out)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """MkDocs hook: fill the marker with the generated tables."""
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, config_reference_markdown())

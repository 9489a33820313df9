"""Tools for the agent: typed Python functions the model can call.

The JSON schema of a tool comes from its signature (pydantic) and its Google-style
docstring (the summary becomes the description, ``Args:`` the parameter descriptions). The
model's arguments are validated against the same schema; what the model gets wrong (bad JSON,
a missing or mistyped argument) and what the function raises come back as an error result the
model can read and act on, never as an exception in the agent loop.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, get_type_hints, overload

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic_core import to_jsonable_python

from ..exceptions import UserError
from .protocols import ToolSpec

__all__ = ["Tool", "ToolResult", "tool"]

ToolFunction = Callable[..., Any]

ERROR_PREFIX = "Error: "
"""Error results start with this, the prefix the strategies' error heuristics recognise."""

_SECTION = re.compile(
    r"^(Args|Arguments|Parameters|Returns|Return|Yields|Raises|Example|Examples|Note|Notes"
    r"|Attributes|See Also|Warning|Warnings|Todo):\s*$"
)
_ARG_LINE = re.compile(r"^(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What one tool call produced: the text for the model and whether it is an error.

    Example:
        >>> ToolResult("42").is_error
        False
    """

    text: str
    is_error: bool = False


def _parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """The description (text before the first section) and the ``Args:`` descriptions."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    summary: list[str] = []
    args: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    arg_indent: int | None = None
    for line in lines:
        stripped = line.strip()
        header = _SECTION.match(stripped) if not line.startswith((" ", "\t")) else None
        if header:
            section, current, arg_indent = header.group(1), None, None
            continue
        if section is None:
            summary.append(line)
            continue
        if section not in ("Args", "Arguments", "Parameters") or not stripped:
            continue
        indent = len(line) - len(line.lstrip())
        match = _ARG_LINE.match(stripped)
        if match and (arg_indent is None or indent <= arg_indent):
            arg_indent = indent
            current = match.group(1).lstrip("*")
            args[current] = match.group(2).strip()
        elif current is not None:
            # A continuation line of the previous argument's description.
            args[current] = f"{args[current]} {stripped}".strip()
    return "\n".join(summary).strip(), args


def _strip_titles(schema: Any) -> Any:
    """Drop pydantic's generated ``title`` keys (noise for the model), keeping property names."""
    if isinstance(schema, dict):
        out: dict[str, Any] = {}
        for key, value in schema.items():
            if key == "title" and isinstance(value, str):
                continue
            if key in ("properties", "$defs", "definitions") and isinstance(value, dict):
                out[key] = {name: _strip_titles(sub) for name, sub in value.items()}
            else:
                out[key] = _strip_titles(value)
        return out
    if isinstance(schema, list):
        return [_strip_titles(item) for item in schema]
    return schema


class Tool:
    """A function the model may call, with a schema, argument validation and error results.

    Sync functions run in a worker thread so that a slow one does not block the other calls
    of the same turn; async functions run on the event loop. The return value is sent to the
    model as is when it is a string, as JSON otherwise.

    Args:
        function: A typed function (sync or async). ``*args``/``**kwargs`` are not allowed.
        name: The name the model sees; the function's name by default.
        description: What the tool does; the docstring's summary by default.

    Example:
        >>> def add(a: int, b: int) -> int:
        ...     '''Add two numbers.
        ...
        ...     Args:
        ...         a: The first number.
        ...         b: The second number.
        ...     '''
        ...     return a + b
        >>> t = Tool(add)
        >>> t.spec.parameters["required"]
        ['a', 'b']
        >>> asyncio.run(t.call('{"a": 1, "b": "2"}')).text
        '3'
    """

    def __init__(
        self,
        function: ToolFunction,
        *,
        name: str | None = None,
        description: str | None = None,
    ) -> None:
        if not callable(function):
            raise UserError(f"a tool must be a callable, got {function!r}")
        self.function = function
        self.name: str = name or str(getattr(function, "__name__", ""))
        if not self.name or not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", self.name):
            raise UserError(
                f"invalid tool name {self.name!r}: use 1-64 letters, digits, '_' or '-' "
                "(pass name=... to Tool)"
            )
        summary, arg_docs = _parse_docstring(inspect.getdoc(function))
        self.description: str = description if description is not None else summary
        self._is_async = inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(
            getattr(function, "__call__", None)  # noqa: B004 - async callable objects
        )
        self._model, self._positional = self._build_model(function, arg_docs)
        self.parameters: dict[str, Any] = _strip_titles(self._model.model_json_schema())
        self.parameters.setdefault("properties", {})

    @classmethod
    def from_function(
        cls,
        function: ToolFunction,
        *,
        name: str | None = None,
        description: str | None = None,
    ) -> Tool:
        """The same as ``Tool(function, name=..., description=...)``."""
        return cls(function, name=name, description=description)

    def _build_model(
        self, function: ToolFunction, arg_docs: Mapping[str, str]
    ) -> tuple[type[BaseModel], list[str]]:
        try:
            signature = inspect.signature(function)
        except (TypeError, ValueError) as exc:
            raise UserError(f"tool {self.name!r}: cannot read the signature: {exc}") from exc
        try:
            hints = get_type_hints(function, include_extras=True)
        except NameError:
            # A type defined inside a function, under ``from __future__ import annotations``:
            # look it up where the tool is being built, as pydantic does for its models.
            try:
                hints = get_type_hints(function, localns=_caller_locals(), include_extras=True)
            except Exception as exc:
                raise UserError(f"tool {self.name!r}: cannot resolve annotations: {exc}") from exc
        except Exception as exc:
            raise UserError(f"tool {self.name!r}: cannot resolve annotations: {exc}") from exc
        fields: dict[str, Any] = {}
        positional: list[str] = []
        for index, (pname, param) in enumerate(signature.parameters.items()):
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise UserError(
                    f"tool {self.name!r}: *{pname} / **{pname} parameters cannot be described "
                    "to a model; give every argument a name and a type"
                )
            if param.kind is param.POSITIONAL_ONLY:
                positional.append(pname)
            annotation = hints.get(pname, Any)
            default = ... if param.default is param.empty else param.default
            # Fields are named by position and aliased to the real name, so that a parameter
            # called e.g. ``json`` or ``schema`` does not clash with BaseModel's attributes.
            fields[f"p{index}"] = (
                annotation,
                Field(default, alias=pname, description=arg_docs.get(pname)),
            )
        model = create_model(
            f"{self.name}_arguments",
            __config__=ConfigDict(extra="forbid", populate_by_name=False),
            **fields,
        )
        return model, positional

    @property
    def spec(self) -> ToolSpec:
        """The name, description and JSON schema sent to the model."""
        return ToolSpec(self.name, self.description, self.parameters)

    def validate(self, arguments: str) -> dict[str, Any]:
        """Parse and validate the model's JSON arguments into keyword arguments.

        Raises:
            ValueError: When the JSON is invalid or does not match the schema; the message is
                written for the model.
        """
        text = arguments.strip() if arguments else ""
        try:
            raw = json.loads(text) if text else {}
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"the arguments are not valid JSON ({exc.msg} at char {exc.pos})"
            ) from None
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            raise ValueError(f"the arguments must be a JSON object, got {type(raw).__name__}")
        try:
            validated = self._model.model_validate(raw)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or '(arguments)'}: {err['msg']}"
                for err in exc.errors(include_url=False)
            )
            raise ValueError(f"invalid arguments: {problems}") from None
        return {
            info.alias or fname: getattr(validated, fname)
            for fname, info in type(validated).model_fields.items()
        }

    async def call(self, arguments: str) -> ToolResult:
        """Run the tool on the model's JSON ``arguments``. Never raises for bad input.

        Invalid arguments and exceptions raised by the function become error results whose
        text starts with ``"Error: "``. Cancellation is not swallowed.
        """
        try:
            kwargs = self.validate(arguments)
        except ValueError as exc:
            return ToolResult(
                f"{ERROR_PREFIX}tool {self.name!r}: {exc}. Call it again with arguments "
                f"matching its schema.",
                is_error=True,
            )
        args = [kwargs.pop(p) for p in self._positional]
        try:
            if self._is_async:
                value = await self.function(*args, **kwargs)
            else:
                value = await asyncio.to_thread(self.function, *args, **kwargs)
        except Exception as exc:
            return ToolResult(
                f"{ERROR_PREFIX}tool {self.name!r} failed: {type(exc).__name__}: {exc}",
                is_error=True,
            )
        return ToolResult(_to_text(value))

    def __repr__(self) -> str:
        return f"Tool(name={self.name!r})"


def _caller_locals(depth: int = 8) -> dict[str, Any]:
    """The local names of the frames that called into this module (nearest wins)."""
    names: dict[str, Any] = {}
    frame = inspect.currentframe()
    while frame is not None and frame.f_globals.get("__name__") == __name__:
        frame = frame.f_back
    for _ in range(depth):
        if frame is None:
            break
        for key, value in frame.f_locals.items():
            names.setdefault(key, value)
        frame = frame.f_back
    return names


def _to_text(value: object) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return json.dumps(to_jsonable_python(value), ensure_ascii=False)


@overload
def tool(function: ToolFunction, /) -> Tool: ...


@overload
def tool(
    *, name: str | None = None, description: str | None = None
) -> Callable[[ToolFunction], Tool]: ...


def tool(
    function: ToolFunction | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
) -> Tool | Callable[[ToolFunction], Tool]:
    """Decorator form of :class:`Tool`: ``@tool`` or ``@tool(name=..., description=...)``.

    Example:
        >>> @tool
        ... async def ping() -> str:
        ...     '''Check the connection.'''
        ...     return "pong"
        >>> ping.spec.description
        'Check the connection.'
    """
    if function is not None:
        return Tool(function, name=name, description=description)

    def wrap(fn: ToolFunction) -> Tool:
        return Tool(fn, name=name, description=description)

    return wrap


ToolLike = Tool | ToolFunction
"""What :class:`~ctxcompact.Agent` accepts as a tool: a :class:`Tool` or a plain function."""


def as_tool(value: ToolLike) -> Tool:
    """``value`` itself when it is a :class:`Tool`, else ``Tool(value)``."""
    return value if isinstance(value, Tool) else Tool(value)

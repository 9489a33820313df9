"""Word pydantic validation errors of the config as :class:`ConfigError` (file, dotted key).

Unknown keys get a close-match suggestion (or the table they belong in), values out of
range get the allowed range, and values under an ``llm`` table are never echoed: a key
pasted into the wrong field must not end up in a log.
"""

from __future__ import annotations

import difflib
import typing
from typing import TYPE_CHECKING, Any

import annotated_types
from pydantic import BaseModel, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

from ..exceptions import ConfigError

if TYPE_CHECKING:
    from pydantic_core import ErrorDetails

__all__ = ["config_error"]

_RANGE_ERRORS = {"greater_than", "greater_than_equal", "less_than", "less_than_equal"}


def config_error(exc: ValidationError, root: type[BaseModel], *, path: str | None) -> ConfigError:
    """One :class:`ConfigError` for all the problems of ``exc``; ``key`` is the first's."""
    problems = [_problem(error, root) for error in exc.errors(include_url=False)]
    key, text = problems[0]
    if len(problems) > 1:
        others = "".join(f"\n  {k or '(top level)'}: {t}" for k, t in problems[1:])
        text = f"{text}\n{len(problems) - 1} more problem(s):{others}"
    return ConfigError(text, path=path, key=key or None)


def _problem(error: ErrorDetails, root: type[BaseModel]) -> tuple[str, str]:
    loc = tuple(str(part) for part in error["loc"])
    key = ".".join(loc)
    kind = error["type"]
    # Values there may be keys (a store URL may hold a password): never repeat them.
    secret = "llm" in loc or loc[-2:] == ("store", "url")
    value = error.get("input")
    if kind == "extra_forbidden":
        return key, _unknown_key(loc, root)
    if kind == "missing":
        return key, "required key is missing"
    if kind in _RANGE_ERRORS and loc:
        allowed = _allowed_range(_model_at(root, loc[:-1]), loc[-1])
        return key, f"{value!r} is out of range; allowed: {allowed}"
    if kind == "literal_error":
        expected = (error.get("ctx") or {}).get("expected", "")
        what = "unknown provider" if loc[-1:] == ("provider",) else "not allowed"
        # A provider is one of a few words, never a secret: show what was written.
        shown = f" {_short(value)}" if not secret or loc[-1] == "provider" else ""
        return key, f"{what}{shown}; expected {expected}"
    message = error["msg"].removeprefix("Value error, ")
    if kind == "value_error" or secret:
        return key, message
    return key, f"{message} (got {type(value).__name__} {_short(value)})"


def _unknown_key(loc: tuple[str, ...], root: type[BaseModel]) -> str:
    name = loc[-1]
    model = _model_at(root, loc[:-1])
    if name == "api_key" and "llm" in loc:
        return (
            "unknown key: never write an API key in the config file; put it in an "
            "environment variable and name that variable in api_key_env"
        )
    if model is None:
        return "unknown key"
    home = _table_of(root, name, ()) if len(loc) == 1 else None
    if home:  # a table's key written above every table: "strategy" is not a typo of "store"
        return f"unknown key here; {name!r} belongs in [{home}]"
    close = difflib.get_close_matches(name, list(model.model_fields), n=1)
    if close:
        return f"unknown key; did you mean {close[0]!r}?"
    home = _table_of(root, name, ())
    if home:
        return f"unknown key here; {name!r} belongs in [{home}]"
    return f"unknown key; known keys here: {', '.join(model.model_fields)}"


def _model_at(root: type[BaseModel], loc: tuple[str, ...]) -> type[BaseModel] | None:
    model: type[BaseModel] | None = root
    for part in loc:
        if part.isdigit() and model is not None:  # an item of a list of tables
            continue
        if model is None or part not in model.model_fields:
            return None
        model = _submodel(model.model_fields[part].annotation)
    return model


def _submodel(annotation: Any) -> type[BaseModel] | None:
    candidates = typing.get_args(annotation) or (annotation,)
    for candidate in candidates:
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _table_of(model: type[BaseModel], name: str, prefix: tuple[str, ...]) -> str | None:
    """The dotted table (``compaction``) that has a key ``name``, searching breadth-first."""
    nested: list[tuple[type[BaseModel], tuple[str, ...]]] = []
    for field_name, info in model.model_fields.items():
        sub = _submodel(info.annotation)
        if sub is not None:
            if name in sub.model_fields:
                return ".".join((*prefix, field_name))
            nested.append((sub, (*prefix, field_name)))
    for sub, sub_prefix in nested:
        found = _table_of(sub, name, sub_prefix)
        if found:
            return found
    return None


def _allowed_range(model: type[BaseModel] | None, name: str) -> str:
    info = model.model_fields.get(name) if model is not None else None
    low = high = ""
    for item in info.metadata if info is not None else ():
        if isinstance(item, annotated_types.Ge):
            low = f"{item.ge} <= "
        elif isinstance(item, annotated_types.Gt):
            low = f"{item.gt} < "
        elif isinstance(item, annotated_types.Le):
            high = f" <= {item.le}"
        elif isinstance(item, annotated_types.Lt):
            high = f" < {item.lt}"
    return f"{low}{name}{high}" if low or high else "see the documentation"


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def field_error(
    model: type[BaseModel], loc: tuple[str, ...], message: str, value: object
) -> ValidationError:
    """A validation error at ``loc`` (below ``model``) raised from a model validator, so that
    a rule across keys still names the one key to change (``compaction.reserved_context_size``)."""
    detail = InitErrorDetails(
        # No context: pydantic-core returns the template as it is, braces included.
        type=PydanticCustomError("value_error", message),
        loc=loc,
        input=value,
    )
    return ValidationError.from_exception_data(model.__name__, [detail])

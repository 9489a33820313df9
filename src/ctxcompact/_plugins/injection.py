"""Read a strategy class's constructor: dependencies by type, params by name (for the loader).

KLIP-13's rule: the positional parameters of ``__init__`` are dependencies, filled by type
from a ``{type: object}`` mapping, up to the first keyword-only parameter (or ``*args``). The
sharp edges fixed here:

- annotations are resolved with :func:`typing.get_type_hints`, so ``from __future__ import
  annotations`` works; a name imported only under ``TYPE_CHECKING`` still resolves when it
  is one of ctxcompact's public contract types, a ``collections.abc`` name, or the name of a
  dependency type offered;
- a dependency matches its key's class, a base class of it, ``X | None``, and Protocols;
- a positional parameter with a default that nothing matches keeps its default;
- keyword-only parameters take ``params``, validated with pydantic.

Protocol matching is structural and a little stricter than ``isinstance`` on a
``runtime_checkable`` Protocol: every public member of the Protocol must exist on the
object, methods must be callable, and ``async`` methods must be ``async`` on the object.
Argument lists are not compared. It works the same for Protocols that are not
``runtime_checkable``.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import inspect
import re
import typing
from dataclasses import dataclass
from decimal import Decimal
from types import SimpleNamespace, UnionType
from typing import TYPE_CHECKING, Any, Protocol, Union, cast

from pydantic import ConfigDict, TypeAdapter, ValidationError
from pydantic.errors import PydanticSchemaGenerationError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ..exceptions import StrategyLoadReason

__all__ = ["ParamInfo", "SignatureError", "StrategySignature", "inspect_class"]

_EMPTY = inspect.Parameter.empty


class SignatureError(Exception):
    """Why a class cannot be built from the given dependencies and params (the loader wraps
    it in a :class:`~ctxcompact.exceptions.StrategyLoadError` with the same fields).

    Attributes:
        reason: ``missing_dependency``, ``bad_params``, ``not_a_strategy`` or
            ``bad_signature`` (the class or its annotations cannot be used).
        choices: The accepted params, for ``bad_params``.
    """

    def __init__(
        self,
        message: str,
        *,
        reason: StrategyLoadReason = "bad_signature",
        choices: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message)
        self.reason: StrategyLoadReason = reason
        self.choices = choices


@dataclass(frozen=True)
class ParamInfo:
    """One constructor parameter of a strategy.

    Attributes:
        name: The parameter name.
        annotation: The annotation as text (``int``, ``LLM | None``), ``""`` when absent.
        default: The default value (``None`` when the parameter is required).
        required: Whether the parameter has no default.

    Example:
        >>> ParamInfo("preserve_recent_n", "int", 5, False).required
        False
    """

    name: str
    annotation: str
    default: object
    required: bool


@dataclass(frozen=True)
class _Param:
    name: str
    text: str
    hint: object  # the resolved annotation, or _EMPTY when there is none
    problem: str | None  # why the annotation could not be resolved
    default: object
    positional_only: bool = False

    @property
    def required(self) -> bool:
        return self.default is _EMPTY

    def info(self) -> ParamInfo:
        default = None if self.required else self.default
        return ParamInfo(self.name, self.text, default, self.required)

    def describe(self) -> str:
        text = f"{self.name}: {self.text or 'Any'}"
        return f"{text} (required)" if self.required else f"{text} = {self.default!r}"


@dataclass(frozen=True)
class StrategySignature:
    """The constructor of a strategy class, split into dependencies and params."""

    owner: str
    positional: tuple[_Param, ...]
    keyword: tuple[_Param, ...]
    var_keyword: _Param | None
    offer: str | None = None  # the keyword-only parameter annotated Dependencies, if any

    def dependency_infos(self) -> tuple[ParamInfo, ...]:
        """The positional parameters, filled from dependencies by type."""
        return tuple(p.info() for p in self.positional)

    def param_infos(self) -> tuple[ParamInfo, ...]:
        """The keyword-only parameters, settable from ``params``."""
        return tuple(p.info() for p in self.keyword)

    def bind_dependencies(self, dependencies: Mapping[type, object]) -> list[object]:
        """The positional arguments: a matching dependency, else the parameter's default."""
        offered = [(k, v) for k, v in dependencies.items() if v is not None]
        for key, _ in offered:
            if not isinstance(key, type):
                raise SignatureError(f"dependency keys must be types, got {key!r}")
        args: list[object] = []
        for param in self.positional:
            value = self._match(param, offered)
            if value is not _EMPTY:
                args.append(value)
            elif not param.required:
                args.append(param.default)
            else:
                given = ", ".join(sorted(_type_name(k) for k, _ in offered)) or "none"
                raise SignatureError(
                    f"missing dependency: parameter {param.name!r} of {self.owner}() needs "
                    f"{param.text or 'a value (it has no annotation)'}, and no dependency "
                    f"matches it (dependencies given: {given})",
                    reason="missing_dependency",
                )
        return args

    def _match(self, param: _Param, offered: list[tuple[type, object]]) -> object:
        if not offered:
            return _EMPTY
        if param.problem is not None:
            raise SignatureError(
                f"cannot resolve the annotation of parameter {param.name!r} of "
                f"{self.owner}(): {param.problem}; import that name at module level "
                "instead of under 'if TYPE_CHECKING:'"
            )
        best: tuple[int, object] | None = None
        for member in _members(param.hint):
            for key, value in offered:
                rank = _rank(member, key, value)
                if rank is not None and (best is None or rank < best[0]):
                    best = (rank, value)
        return _EMPTY if best is None else best[1]

    def validate_params(self, params: Mapping[str, Any]) -> dict[str, object]:
        """Keyword arguments from ``params``, validated against the annotations."""
        by_name = {p.name: p for p in self.keyword}
        positional = {p.name for p in self.positional}
        problems: list[str] = []
        kwargs: dict[str, object] = {}
        for name, value in params.items():
            param = by_name.get(name)
            if param is None and name not in positional and self.var_keyword is not None:
                param = self.var_keyword
            if param is None:
                problems.append(self._unknown(name, positional))
                continue
            try:
                kwargs[name] = _validate(param, value)
            except SignatureError as exc:
                problems.append(f"{name}: {exc}")
        problems += [
            f"{p.name}: missing, it is required"
            for p in self.keyword
            if p.required and p.name not in params
        ]
        if problems:
            raise SignatureError(
                f"bad params for {self.owner}(): {'; '.join(problems)}. "
                f"Accepted params: {self._accepted()}",
                reason="bad_params",
                choices=tuple(p.name for p in self.keyword),
            )
        return kwargs

    def _unknown(self, name: object, positional: set[str]) -> str:
        if name in positional:
            return (
                f"{name!r} is a positional parameter, injected from dependencies by type; "
                "it cannot be set in params"
            )
        return f"unknown parameter {name!r}"

    def _accepted(self) -> str:
        if not self.keyword:
            return f"none ({self.owner}() takes no keyword-only parameters)"
        return ", ".join(p.describe() for p in self.keyword)


def inspect_class(
    cls: type, *, extra_names: Mapping[str, object] | None = None
) -> StrategySignature:
    """Split ``cls``'s constructor into dependencies and params, resolving annotations.

    Raises:
        SignatureError: The class is abstract or its signature cannot be read.
    """
    owner = cls.__qualname__
    if inspect.isabstract(cls):
        missing = ", ".join(sorted(getattr(cls, "__abstractmethods__", ())))
        raise SignatureError(f"{owner} is abstract (it does not implement {missing})")
    signature, namespace = _constructor(cls)
    names = {**_FALLBACK_NAMES, **(extra_names or {}), **namespace}
    positional: list[_Param] = []
    keyword: list[_Param] = []
    var_keyword: _Param | None = None
    past_positional = False
    offer: str | None = None
    for p in signature.parameters.values():
        param = _param(p, names)
        if p.default is not _EMPTY and dataclasses.is_dataclass(cls):
            param = dataclasses.replace(param, default=_field_default(cls, p.name, p.default))
        if p.kind is p.VAR_POSITIONAL:
            past_positional = True  # dependencies stop at *args, as at keyword-only ones
        elif p.kind is p.VAR_KEYWORD:
            var_keyword = param
        elif p.kind is p.KEYWORD_ONLY and _DEPENDENCIES in _members(param.hint):
            offer = param.name  # gets the whole offer; not a param
        elif p.kind is p.KEYWORD_ONLY:
            keyword.append(param)
        elif not past_positional:
            positional.append(param)
    return StrategySignature(owner, tuple(positional), tuple(keyword), var_keyword, offer)


def _field_default(cls: type, name: str, default: object) -> object:
    """A dataclass option's default: its ``default_factory``'s value where the signature
    only has dataclasses' placeholder for it (so a listing shows the real default)."""
    field = next((f for f in dataclasses.fields(cls) if f.name == name), None)
    if field is not None and field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return default


def _constructor(cls: type) -> tuple[inspect.Signature, dict[str, Any]]:
    init: object = object.__init__
    placeholder = False
    for klass in cls.__mro__:
        candidate = klass.__dict__.get("__init__")
        if candidate is None:
            continue
        # A class that subclasses a Protocol gets typing's placeholder __init__ when it
        # defines none; the real constructor is further up the MRO.
        if getattr(candidate, "__name__", "") == "_no_init_or_replace_init":
            placeholder = True
            continue
        init = candidate
        break
    namespace = _globals(cls, init)
    new: object = cls.__new__
    try:
        if init is object.__init__ and new is object.__new__:
            return inspect.Signature(), namespace
        if placeholder and callable(init):
            full = inspect.signature(init)
            return full.replace(parameters=list(full.parameters.values())[1:]), namespace
        return inspect.signature(cls), namespace
    except (TypeError, ValueError) as exc:
        raise SignatureError(f"cannot read the signature of {cls.__qualname__}(): {exc}") from exc


def _globals(cls: type, init: object) -> dict[str, Any]:
    func = inspect.unwrap(init) if callable(init) else init
    found = getattr(func, "__globals__", None)
    if isinstance(found, dict):
        return found
    module = inspect.getmodule(cls)
    return dict(vars(module)) if module is not None else {}


def _param(p: inspect.Parameter, names: dict[str, Any]) -> _Param:
    annotation = p.annotation
    if annotation is _EMPTY:
        text, hint, problem = "", _EMPTY, None
    else:
        text = annotation if isinstance(annotation, str) else _public(annotation)
        holder = SimpleNamespace(__annotations__={p.name: annotation})
        try:
            hint = typing.get_type_hints(holder, globalns=names, include_extras=True)[p.name]
            problem = None
        except Exception as exc:
            hint, problem = _EMPTY, f"{type(exc).__name__}: {exc}"
    return _Param(p.name, text, hint, problem, p.default, p.kind is p.POSITIONAL_ONLY)


_PRIVATE_PATH = re.compile(r"\bctxcompact(?:\.\w+)*\.(\w+)\b")


def _public(annotation: object) -> str:
    """An annotation as users write it: ``ctxcompact.LLM``, not its private module's path."""
    text = inspect.formatannotation(annotation)
    return _PRIVATE_PATH.sub(
        lambda m: f"ctxcompact.{m[1]}" if "._" in m[0] and m[1] in _FALLBACK_NAMES else m[0],
        text,
    )


def _members(hint: object) -> list[object]:
    """The types an annotation accepts: ``X | None`` -> X; ``Annotated[X, ...]`` -> X."""
    while typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    origin = typing.get_origin(hint)
    if origin is Union or origin is UnionType:
        found: list[object] = []
        for arg in typing.get_args(hint):
            found += _members(arg)
        return found
    if hint is type(None) or hint is Any or hint is object or hint is _EMPTY:
        return []  # too loose to inject into: every dependency would match
    if origin is not None and isinstance(origin, type):
        return [origin]
    return [hint] if isinstance(hint, type) else []


def _rank(member: object, key: type, value: object) -> int | None:
    """How well a dependency fits: 0 its key is the type, 1 a subclass/instance, 2 a Protocol."""
    if not isinstance(member, type):
        return None
    if key is member:
        return 0
    if member in key.__mro__:
        return 1
    if _is_protocol(member):
        return 2 if _satisfies(value, member) else None
    return 1 if isinstance(value, member) else None


def _is_protocol(cls: type) -> bool:
    return bool(getattr(cls, "_is_protocol", False)) and cls is not Protocol


def _satisfies(value: object, protocol: type) -> bool:
    for name, member in _protocol_members(protocol).items():
        try:
            found = getattr(value, name)
        except AttributeError:
            return False
        if callable(member) and not callable(found):
            return False
        if inspect.iscoroutinefunction(member) and not inspect.iscoroutinefunction(found):
            return False
    return True


def _protocol_members(protocol: type) -> dict[str, object]:
    members: dict[str, object] = {}
    for base in reversed(protocol.__mro__):
        if not _is_protocol(base) or base.__module__ in ("typing", "typing_extensions"):
            continue
        for name in getattr(base, "__annotations__", {}):
            members.setdefault(name, None)
        for name, member in vars(base).items():
            if not name.startswith("_") or name == "__call__":
                members[name] = member
    return members


def _validate(param: _Param, value: object) -> object:
    if param.hint is _EMPTY:
        if param.problem is not None:
            raise SignatureError(f"its annotation cannot be resolved ({param.problem})")
        return value
    adapter = _adapter(param.hint)
    if adapter is None:
        return value  # a type pydantic cannot check: the constructor gets the value as is
    try:
        try:
            return adapter.validate_python(value, strict=True)
        except ValidationError as strict_error:
            # Lax mode turns a TOML array into a tuple and a string into a Path or an Enum,
            # but a scalar is never silently turned into another kind of scalar ("7" -> 7,
            # 0 -> False, 5.0 -> 5), as in the config file itself.
            result = adapter.validate_python(value)
            if _changed_kind(value, result):
                raise strict_error from None
            return result
    except ValidationError as exc:
        details = []
        for error in exc.errors():
            where = ".".join(str(part) for part in error["loc"])
            details.append(f"{where + ': ' if where else ''}{error['msg']}")
        raise SignatureError(
            f"expected {param.text}, got {_short(value)}: {', '.join(details)}"
        ) from None
    except TypeError:
        return value  # e.g. isinstance() against a Protocol that is not runtime_checkable


def _changed_kind(value: object, result: object) -> bool:
    if isinstance(result, bool):
        return not isinstance(value, bool)
    if isinstance(result, (int, float, Decimal)):
        return isinstance(value, (str, bool)) or (
            isinstance(result, int) and isinstance(value, float)
        )
    return False


def _adapter(hint: object) -> TypeAdapter[Any] | None:
    try:
        return TypeAdapter(cast("Any", hint))
    except PydanticSchemaGenerationError:
        try:
            return TypeAdapter(cast("Any", hint), config=ConfigDict(arbitrary_types_allowed=True))
        except Exception:
            return None
    except Exception:
        return None


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _type_name(key: object) -> str:
    return str(getattr(key, "__qualname__", key))


def _fallback_names() -> dict[str, object]:
    from .._contract import protocols as _contract
    from .._history import messages as _messages
    from .._tokens import counters as _tokens

    names: dict[str, object] = {
        name: getattr(collections.abc, name) for name in collections.abc.__all__
    }
    for module in (_messages, _tokens, _contract):
        names.update({name: getattr(module, name) for name in module.__all__})
    return names


_FALLBACK_NAMES = _fallback_names()
_DEPENDENCIES = _FALLBACK_NAMES["Dependencies"]

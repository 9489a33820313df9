"""Turn a strategy spec into a working strategy object (KLIP-13 loading, sharp edges fixed).

A spec is ``package.module:ClassName`` or a short name registered in the entry-point group
``ctxcompact.strategies``. Both become an :class:`importlib.metadata.EntryPoint` and are
loaded the same way (flake8's ``plugins/finder.py`` does the same), so there is one load
path and one error type, :class:`~ctxcompact.exceptions.StrategyLoadError`.

Everything is checked when loading (spec, import, class, dependencies, params, the
``compact`` method), never later when the strategy is first called.
"""

from __future__ import annotations

import difflib
import inspect
import re
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import import_module
from importlib.metadata import EntryPoint, entry_points
from types import MappingProxyType, ModuleType
from typing import TYPE_CHECKING, Any

from .._contract.protocols import Dependencies
from ..exceptions import ConfigError, StrategyLoadError
from .injection import ParamInfo, SignatureError, StrategySignature, inspect_class

if TYPE_CHECKING:
    from .._contract.protocols import CompactionStrategy

__all__ = ["ENTRY_POINT_GROUP", "ParamInfo", "StrategyInfo", "list_strategies", "load_strategy"]

ENTRY_POINT_GROUP = "ctxcompact.strategies"

_IDENT = r"[^\W\d]\w*"
_SPEC_RE = re.compile(rf"(?P<module>{_IDENT}(?:\.{_IDENT})*):(?P<attr>{_IDENT}(?:\.{_IDENT})*)")
_NAME_RE = re.compile(r"[\w][\w.\-]*")


@dataclass(frozen=True)
class StrategyInfo:
    """One registered strategy, as ``ctxcompact strategies`` lists it.

    Attributes:
        name: The entry-point name (``tool-result-hiding``).
        target: What it points to (``ctxcompact.strategies:ToolResultHiding``).
        summary: The first line of the class docstring.
        params: The keyword-only parameters settable from ``[compaction.params]``.
        dependencies: The positional parameters, injected by type (an LLM...).
        error: Why the class could not be inspected (then ``params`` is empty).

    Example:
        >>> [info.name for info in list_strategies()][:1]
        ['context-guard']
    """

    name: str
    target: str
    summary: str = ""
    params: tuple[ParamInfo, ...] = ()
    dependencies: tuple[ParamInfo, ...] = ()
    error: str | None = field(default=None)


def load_strategy(
    spec: str,
    *,
    dependencies: Mapping[type, object] = MappingProxyType({}),
    params: Mapping[str, Any] | None = None,
) -> CompactionStrategy:
    """Load, build and check a compaction strategy.

    Args:
        spec: ``package.module:ClassName`` or an entry-point name of the
            ``ctxcompact.strategies`` group (``hiding-then-summary``).
        dependencies: Objects offered to the constructor's positional parameters, keyed by
            type (``{LLM: my_llm}``). A parameter takes the dependency whose key is its
            annotation, a subclass of it, or whose value satisfies it (a Protocol). ``None``
            values are ignored.
        params: Values for the keyword-only parameters (TOML ``[compaction.params]``),
            validated with pydantic against their annotations.

    Returns:
        The strategy instance; it has an ``async def compact(ctx)``.

    Raises:
        StrategyLoadError: The spec is malformed or unknown, the module or class cannot be
            imported, a required dependency is missing, a param is unknown or has the wrong
            type, the constructor raised, or the object is not a strategy.

    Example:
        >>> strategy = load_strategy("tool-result-hiding", params={"preserve_recent_n": 3})
    """
    entry_point = _entry_point(spec)
    if params is not None and not isinstance(params, Mapping):
        raise StrategyLoadError(
            spec, f"params must be a mapping, not {type(params).__name__}", reason="bad_params"
        )
    cls = _load_class(spec, entry_point)
    try:
        signature = inspect_class(cls, extra_names=_type_names(dependencies))
        _check_compact(cls)
        args = signature.bind_dependencies(dependencies)
        kwargs = signature.validate_params(params or {})
        if signature.offer is not None:
            kwargs[signature.offer] = Dependencies(dependencies)
    except SignatureError as exc:
        raise StrategyLoadError(
            spec, str(exc), reason=exc.reason, choices=exc.choices
        ) from exc.__cause__
    try:
        instance = cls(*args, **kwargs)
    except Exception as exc:
        raise StrategyLoadError(
            spec,
            f"{_target(entry_point)}(...) raised {_describe(exc)}",
            reason="constructor_raised",
        ) from exc
    try:
        _check_compact(instance)
    except SignatureError as exc:
        raise StrategyLoadError(spec, f"the instance {exc}", reason=exc.reason) from None
    strategy: CompactionStrategy = instance
    return strategy


def list_strategies() -> list[StrategyInfo]:
    """Every strategy registered in the ``ctxcompact.strategies`` entry-point group.

    A strategy whose class cannot be imported is still listed, with ``error`` set, so that
    one broken plugin does not hide the others.
    """
    infos: list[StrategyInfo] = []
    for entry_point in sorted(_registered().values(), key=lambda ep: ep.name):
        try:
            cls = _load_class(entry_point.name, entry_point)
            signature = inspect_class(cls)
        except (StrategyLoadError, SignatureError) as exc:
            infos.append(StrategyInfo(entry_point.name, entry_point.value, error=str(exc)))
            continue
        infos.append(_info(entry_point, cls, signature))
    return infos


def _info(entry_point: EntryPoint, cls: type, signature: StrategySignature) -> StrategyInfo:
    doc = inspect.getdoc(cls) or ""
    return StrategyInfo(
        name=entry_point.name,
        target=entry_point.value,
        summary=doc.strip().splitlines()[0] if doc.strip() else "",
        params=signature.param_infos(),
        dependencies=signature.dependency_infos(),
    )


def _registered() -> dict[str, EntryPoint]:
    found: dict[str, EntryPoint] = {}
    for entry_point in entry_points(group=ENTRY_POINT_GROUP):
        # entry_points() already merges a distribution seen twice on sys.path; two
        # different distributions claiming one name are reported when that name is used.
        found.setdefault(entry_point.name, entry_point)
    return found


def params_problem(spec: str, params: Mapping[str, Any]) -> str | None:
    """Why ``params`` do not fit the strategy ``spec`` names, or ``None``.

    Checked from the class's signature, without building it, so a config can report bad
    ``[compaction.params]`` when it loads (pluggy's habit: validate at registration). A spec
    that cannot be imported here is not judged: building it reports that, naming the spec.
    """
    try:
        cls = _load_class(spec, _entry_point(spec))
        signature = inspect_class(cls)
    except (StrategyLoadError, SignatureError):
        return None
    try:
        signature.validate_params(params)
    except SignatureError as exc:
        return str(exc)
    return None


def spec_problem(spec: str) -> str | None:
    """Why ``spec`` is not even shaped like a spec, or ``None`` (nothing is imported)."""
    if ":" in spec:
        if not _SPEC_RE.fullmatch(spec):
            return "malformed spec: expected 'package.module:ClassName' (no spaces)"
    elif not _NAME_RE.fullmatch(spec):
        return "malformed spec: expected 'package.module:ClassName' or an entry-point name"
    return None


def _entry_point(spec: str) -> EntryPoint:
    if not isinstance(spec, str):
        raise StrategyLoadError(
            repr(spec),
            f"a spec must be a string, not {type(spec).__name__}",
            reason="malformed_spec",
        )
    problem = spec_problem(spec)
    if problem is not None:
        raise StrategyLoadError(spec, problem, reason="malformed_spec")
    if ":" in spec:
        # A module:attr spec becomes an entry point too, so both kinds load the same way.
        return EntryPoint(name=spec, value=spec, group=ENTRY_POINT_GROUP)
    return _named_entry_point(spec)


def _named_entry_point(spec: str) -> EntryPoint:
    matches = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == spec]
    targets = sorted({ep.value for ep in matches})
    if len(targets) > 1:
        raise StrategyLoadError(
            spec,
            f"the name is registered more than once, for {', '.join(targets)}",
            reason="ambiguous_name",
            choices=tuple(targets),
        )
    if matches:
        return matches[0]
    names = sorted(_registered())
    hint = ""
    close = difflib.get_close_matches(spec, names, n=3)
    if close:
        hint = f"; did you mean {_quoted(close)}?"
    elif "." in spec:
        module, _, attr = spec.rpartition(".")
        hint = f"; for a class write it as '{module}:{attr}'"
    raise StrategyLoadError(
        spec,
        f"no strategy named {spec!r} in entry-point group {ENTRY_POINT_GROUP!r}{hint}; "
        f"registered: {', '.join(names) or '(none)'}",
        reason="unknown_name",
        choices=tuple(names),
    )


def _load_class(spec: str, entry_point: EntryPoint) -> type:
    module_name, attr = entry_point.module, entry_point.attr
    if not attr:
        raise StrategyLoadError(
            spec,
            f"entry point {entry_point.value!r} names a module, not 'module:ClassName'",
            reason="not_a_class",
        )
    module = _import(spec, module_name)
    obj: object = module
    walked = module_name
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            hint, choices = _suggest(obj, part)
            raise StrategyLoadError(
                spec,
                f"{walked!r} has no attribute {part!r}{hint}",
                reason="no_attribute",
                choices=choices,
            ) from None
        except Exception as exc:  # a lazy module's __getattr__ may import and fail
            raise StrategyLoadError(
                spec,
                f"getting {part!r} from {walked!r} failed: {_describe(exc)}",
                reason="import_failed",
            ) from exc
        walked = f"{walked}:{part}" if walked == module_name else f"{walked}.{part}"
    if not isinstance(obj, type):
        raise StrategyLoadError(
            spec,
            f"{entry_point.value!r} is {_kind(obj)}, not a class: name the strategy class",
            reason="not_a_class",
        )
    return obj


def _import(spec: str, module_name: str) -> ModuleType:
    try:
        return import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing and (module_name == missing or module_name.startswith(missing + ".")):
            raise StrategyLoadError(
                spec,
                f"module {module_name!r} not found (no module named {missing!r} on sys.path)",
                reason="module_not_found",
            ) from exc
        raise _import_failed(spec, module_name, exc) from exc
    except Exception as exc:
        raise _import_failed(spec, module_name, exc) from exc


def _import_failed(spec: str, module_name: str, exc: BaseException) -> StrategyLoadError:
    return StrategyLoadError(
        spec,
        f"module {module_name!r} was found but importing it failed: {_describe(exc)}",
        reason="import_failed",
    )


def _suggest(obj: object, attr: str) -> tuple[str, tuple[str, ...]]:
    """The hint for a missing attribute, and the names it offers."""
    names = [name for name in dir(obj) if not name.startswith("_")]
    close = difflib.get_close_matches(attr, names, n=3)
    if close:
        return f"; did you mean {_quoted(close)}?", tuple(close)
    classes = [n for n in names if isinstance(getattr(obj, n, None), type)]
    strategies = [n for n in classes if callable(getattr(getattr(obj, n), "compact", None))]
    if strategies:
        found = tuple(sorted(strategies))
        return f"; strategy classes there: {', '.join(found)}", found
    return "", ()


def _check_compact(obj: object) -> None:
    compact = getattr(obj, "compact", None)
    what = obj.__name__ if isinstance(obj, type) else type(obj).__name__
    if compact is None:
        raise SignatureError(
            f"is not a compaction strategy: {what} has no 'compact' method "
            "(expected 'async def compact(self, ctx)')",
            reason="not_a_strategy",
        )
    if not inspect.iscoroutinefunction(compact):
        raise SignatureError(
            f"is not a compaction strategy: {what}.compact must be 'async def compact(self, ctx)'",
            reason="not_a_strategy",
        )
    if not isinstance(obj, type):
        try:
            inspect.signature(compact).bind(None)
        except TypeError:
            raise SignatureError(
                f"is not a compaction strategy: {what}.compact must accept one argument (ctx)",
                reason="not_a_strategy",
            ) from None
        except ValueError:  # no signature available: nothing more to check
            pass


def _type_names(dependencies: Mapping[type, object]) -> dict[str, object]:
    return {getattr(key, "__name__", ""): key for key in dependencies if isinstance(key, type)}


def _target(entry_point: EntryPoint) -> str:
    return entry_point.value.replace(":", ".")


def _kind(obj: object) -> str:
    if isinstance(obj, ModuleType):
        return "a module"
    if inspect.isfunction(obj) or inspect.isbuiltin(obj):
        return "a function"
    return f"an instance of {type(obj).__name__}"


def _quoted(names: list[str]) -> str:
    return " or ".join(repr(name) for name in names)


def _describe(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    frames = traceback.extract_tb(exc.__traceback__)
    # The innermost frame says where it went wrong (a SyntaxError carries its own place; a
    # ConfigError is a setting refused on purpose, and its key says which).
    if frames and not isinstance(exc, (SyntaxError, ConfigError)):
        last = frames[-1]
        text += f" (at {last.filename}:{last.lineno})"
    return text

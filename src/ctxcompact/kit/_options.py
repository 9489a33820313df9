"""A strategy's options: checked like the built-ins' when it is built, shown in its repr."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING

from ..exceptions import ConfigError

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["check_int", "options_repr"]


def check_int(name: str, value: int, *, minimum: int = 0) -> int:
    """``value`` if it is an ``int`` (not a ``bool``) ``>= minimum``, else a
    :class:`~ctxcompact.exceptions.ConfigError` naming the parameter ``name``.

    Example:
        >>> check_int("batch_turns", 4)
        4
        >>> check_int("batch_turns", -1)
        Traceback (most recent call last):
        ...
        ctxcompact.exceptions.ConfigError: key 'batch_turns': must be >= 0, got -1
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"must be an integer, got {value!r}", key=name)
    if value < minimum:
        raise ConfigError(f"must be >= {minimum}, got {value}", key=name)
    return value


_OPTIONS: dict[type, tuple[tuple[str, object], ...]] = {}


def _options(cls: type) -> tuple[tuple[str, object], ...]:
    """``(name, default)`` of each keyword-only parameter of ``cls``'s constructor."""
    found = _OPTIONS.get(cls)
    if found is None:
        parameters = inspect.signature(cls).parameters.values()
        kind = inspect.Parameter.KEYWORD_ONLY
        found = _OPTIONS[cls] = tuple((p.name, p.default) for p in parameters if p.kind is kind)
    return found


def options_repr(obj: object, *parts: object, positional: Iterable[object] = ()) -> str:
    """``Type(option=value, ...)`` for the options of ``obj`` that differ from their defaults.

    The options are the keyword-only parameters of ``type(obj).__init__``, which is where a
    strategy's parameters are (:func:`~ctxcompact.load_strategy` passes ``params`` to
    them). Each value is read from the attribute of the same name on ``obj`` or, if it has
    none, on the first of ``parts`` that has one (a strategy that keeps some options on a
    policy or a sub-strategy); an option kept under no such name is left out. ``positional``
    values come first (a pipeline's steps). So ``__repr__`` is one line that cannot drift
    from the signature, and the repr reads like the call that built the object.

    Example:
        >>> class HideOld:
        ...     def __init__(self, *, keep: int = 3, placeholder: str = "[hidden]") -> None:
        ...         self.keep, self.placeholder = keep, placeholder
        ...     def __repr__(self) -> str:
        ...         return options_repr(self)
        >>> HideOld(), HideOld(keep=5)
        (HideOld(), HideOld(keep=5))
    """
    shown = [repr(value) for value in positional]
    sources = (obj, *parts)
    for name, default in _options(type(obj)):
        source = next((s for s in sources if hasattr(s, name)), None)
        if source is None:
            continue
        value = getattr(source, name)
        if default is inspect.Parameter.empty or value != default:
            shown.append(f"{name}={value!r}")
    return f"{type(obj).__name__}({', '.join(shown)})"

"""Config tables derived from a strategy's constructor: its parameters are declared once.

``[observation_masking.schema1]``, ``[tool_result_truncation]`` and ``[context_guard]`` each
turn on one built-in strategy as a per-request transform. Their keys are ``enabled`` plus
the strategy's keyword-only parameters, with the constructor's annotations and defaults
(pydantic-ai-harness's habit: the fields are the parameters). Range and cross-key checks
are the constructor's own: the config builds each enabled table's strategy when it loads,
so a mistake is reported at load time, once, in the constructor's words.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, create_model

from .._plugins.injection import inspect_class
from ..exceptions import ConfigError

__all__ = ["TransformTable", "guard_window", "transform_table"]


class TransformTable(BaseModel):
    """A table that turns on one strategy as a per-request transform.

    Attributes:
        enabled: Whether the transform runs.
    """

    # strict: TOML already has types, so "5000" for an integer is a mistake worth reporting.
    model_config = ConfigDict(extra="forbid", strict=True, validate_assignment=True)

    strategy_class: ClassVar[type]
    """The strategy the table configures."""
    fixed: ClassVar[frozenset[str]] = frozenset()
    """Constructor parameters the wiring sets (not keys of the table)."""

    enabled: bool = False

    def params(self) -> dict[str, Any]:
        """The table's settings as the strategy's keyword arguments (``enabled`` left out)."""
        return self.model_dump(exclude={"enabled"})

    def build(self, **fixed: Any) -> Any:
        """The configured strategy; ``fixed`` gives the parameters the table does not hold,
        or holds unset (``None``).

        Raises:
            ConfigError: The constructor refused a value (``key`` is the table's key).
        """
        params = self.params()
        for key in [k for k in fixed if k in params and params[k] is not None]:
            del fixed[key]  # the table's own value wins
        return self.strategy_class(**{**params, **fixed})

    def check(self, **fixed: Any) -> None:
        """Build the strategy once to run the constructor's checks (config load time)."""
        try:
            self.build(**fixed)
        except ConfigError:
            raise
        except (TypeError, ValueError) as exc:  # pragma: no cover - a constructor bug
            raise ConfigError(f"{type(exc).__name__}: {exc}") from exc


def guard_window(table: TransformTable, window: int | None, reserved: int) -> dict[str, Any]:
    """What the wiring sets on a table's strategy: for ``[context_guard]``, the window, and
    the controller's reserve as ``reserve_tokens`` unless the table sets its own (so the
    guard's "fits" is the trigger's); nothing for the other tables."""
    if "context_window" not in table.fixed:
        return {}
    if window is None:
        return {"context_window": None}
    return {"context_window": window, "reserve_tokens": reserved}


def transform_table(
    name: str, cls: type, *, fixed: frozenset[str] = frozenset(), doc: str
) -> type[TransformTable]:
    """A :class:`TransformTable` whose keys are ``cls``'s keyword-only parameters.

    Example:
        >>> from ctxcompact.strategies import ToolResultTruncation
        >>> Table = transform_table("T", ToolResultTruncation, doc="truncation")
        >>> Table().params()["max_chars"]
        50000
    """
    signature = inspect_class(cls)
    fields: dict[str, Any] = {}
    for param in signature.keyword:
        if param.name in fixed or param.name == "enabled":
            continue
        if param.required:
            raise TypeError(f"{cls.__qualname__}() parameter {param.name!r} needs a default")
        fields[param.name] = (param.hint, Field(default=param.default))
    table: type[TransformTable] = create_model(name, __base__=TransformTable, __doc__=doc, **fields)
    table.strategy_class = cls
    table.fixed = fixed
    return table

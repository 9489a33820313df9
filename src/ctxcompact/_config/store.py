"""``[store]``: the originals store and recall, as configured in TOML.

:func:`ctxcompact.wire` builds the store (:class:`~ctxcompact.store.SQLiteStore` for a
``path``, else :class:`~ctxcompact.store.MemoryStore` when ``recall`` is on); the proxy's and
the command line's default file (:func:`~ctxcompact.store.default_store_path`) is used
unless ``enabled = false``.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..exceptions import ConfigError
from ..store._memory import DEFAULT_MAX_BYTES
from ..store._recall import DEFAULT_RECALL_TEMPLATE, recall_placeholder

__all__ = ["StoreConfig"]


class StoreConfig(BaseModel):
    """``[store]``: keep what compaction removes, and let the model recall it.

    ``path`` is a SQLite file (``~`` expanded, relative to the config file's folder);
    ``recall = true`` without a ``path`` keeps the originals in memory for the life of the
    process. Without either, the library attaches no store, and ``ctxcompact proxy`` opens
    its default file in the user's cache folder (:func:`~ctxcompact.store.default_store_path`);
    ``enabled = false`` turns every store off, that one included (``--no-store``).

    Example:
        >>> StoreConfig(recall=True).recall_placeholder
        '[tool result hidden: call recall_tool_result("{tool_call_id}") to see it again]'
    """

    # strict, as every table: TOML already has types.
    model_config = ConfigDict(extra="forbid", strict=True, validate_assignment=True)

    enabled: bool | None = None
    """``false``: no store at all, not even a default one; unset or ``true``: the store
    ``path`` and ``recall`` describe, or the caller's default."""
    path: str | None = Field(default=None, min_length=1)
    max_bytes: int = Field(default=DEFAULT_MAX_BYTES, ge=1)
    recall: bool = False
    recall_placeholder: str = Field(default=DEFAULT_RECALL_TEMPLATE, min_length=1)

    @field_validator("recall_placeholder")
    @classmethod
    def _template(cls, value: str) -> str:
        try:
            recall_placeholder("x", template=value)
        except ConfigError as exc:
            raise ValueError(exc.message) from None
        return value

    @model_validator(mode="after")
    def _not_both(self) -> StoreConfig:
        if self.enabled is False and (self.path is not None or self.recall):
            key = "path" if self.path is not None else "recall"
            raise ValueError(f"enabled = false turns the store off, but {key} asks for one")
        return self

    @property
    def configured(self) -> bool:
        """Whether the table asks for a store itself (a ``path``, or ``recall`` on)."""
        return self.path is not None or self.recall

    def disabled(self) -> StoreConfig:
        """This table with every store turned off (``--no-store``)."""
        return StoreConfig(
            enabled=False, max_bytes=self.max_bytes, recall_placeholder=self.recall_placeholder
        )

    def resolved_path(self, config_path: Path | None) -> Path | None:
        """``path`` with ``~`` expanded, relative to the config file's folder."""
        if self.path is None:
            return None
        path = Path(self.path).expanduser()
        if not path.is_absolute() and config_path is not None:
            path = config_path.parent / path
        return path

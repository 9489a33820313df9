"""``[store]``: the originals store and recall, as configured in TOML.

:func:`ctxcompact.wire` builds the store (:class:`~ctxcompact.store.RedisStore` for a
``url``, :class:`~ctxcompact.store.SQLiteStore` for a ``path``, else
:class:`~ctxcompact.store.MemoryStore` when ``recall`` is on).
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..exceptions import ConfigError
from ..store._memory import DEFAULT_MAX_BYTES
from ..store._recall import DEFAULT_RECALL_TEMPLATE, recall_placeholder

__all__ = ["StoreConfig"]


class StoreConfig(BaseModel):
    """``[store]``: keep what compaction removes, and let the model recall it.

    Without ``path``, ``url`` and ``recall``, no store is attached. ``path`` is a SQLite file
    (``~`` expanded, relative to the config file's folder); ``url`` a Redis server
    (``redis://[[user]:password@]host[:port][/db]``, ``rediss://`` or ``unix://``; the
    ``redis`` extra), which processes on several machines share: give every replica the same
    ``url`` and ``prefix``. ``recall = true`` without either keeps the originals in memory for
    the life of the process. ``ttl`` (Redis only): seconds an entry lives after it was last
    stored (none by default: the ``max_bytes`` bound alone evicts).

    Example:
        >>> StoreConfig(recall=True).recall_placeholder
        '[tool result hidden: call recall_tool_result("{tool_call_id}") to see it again]'
    """

    # strict, as every table: TOML already has types.
    model_config = ConfigDict(extra="forbid", strict=True, validate_assignment=True)

    path: str | None = Field(default=None, min_length=1)
    url: str | None = Field(default=None, min_length=1)
    prefix: str = Field(default="ctxcompact", pattern=r"^[A-Za-z0-9_.:-]{1,64}$")
    ttl: float | None = Field(default=None, gt=0)
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

    @field_validator("url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        # Never echo the value: it may carry a password.
        if value is not None and urlsplit(value).scheme not in ("redis", "rediss", "unix"):
            raise ValueError("must be a redis://, rediss:// or unix:// URL")
        return value

    @model_validator(mode="after")
    def _one_place(self) -> StoreConfig:
        if self.path is not None and self.url is not None:
            raise ValueError("give path (a SQLite file) or url (a Redis server), not both")
        if self.ttl is not None and self.url is None:
            raise ValueError("ttl applies to a Redis store (url) only")
        return self

    @property
    def enabled(self) -> bool:
        """Whether a store is attached (a ``path`` or a ``url``, or ``recall`` on)."""
        return self.path is not None or self.url is not None or self.recall

    def resolved_path(self, config_path: Path | None) -> Path | None:
        """``path`` with ``~`` expanded, relative to the config file's folder."""
        if self.path is None:
            return None
        path = Path(self.path).expanduser()
        if not path.is_absolute() and config_path is not None:
            path = config_path.parent / path
        return path

"""``[store]``: the originals store and recall, as configured in TOML.

:func:`ctxcompact.wire` builds the store (:class:`~ctxcompact.store.RedisStore` for a
``url``, :class:`~ctxcompact.store.SQLiteStore` for a ``path``, else a
:class:`~ctxcompact.store.MemoryStore`); ``ctxcompact proxy`` and ``wrap`` open their default
file (:func:`~ctxcompact.store.default_store_path`) when the table names none. ``enabled =
false``: no store anywhere.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..exceptions import ConfigError
from ..kit import DEFAULT_RECALL_TEMPLATE, recall_placeholder
from ..store._memory import DEFAULT_MAX_BYTES

__all__ = ["StoreConfig"]


MEMORY_PATH = ":memory:"
"""The ``[store] path`` that asks for an in-memory store, as SQLite spells it."""


class StoreConfig(BaseModel):
    """``[store]``: keep what compaction removes, and let the model recall it.

    With a store (the default), every marker names the handle to recall its original with
    (:mod:`ctxcompact.kit._markers`) and the agent and the proxy offer the model
    ``recall_tool_result``. ``recall = false`` keeps the originals but leaves the
    strategies' plain markers and offers no tool (the recall forms are a few tokens longer;
    ``examples/recommended.toml`` counts them when it fits, and on the public traces sends
    16.7% of no compaction's input at 16k either way, 31.6% against 31.3% at 32k).
    ``path`` is a SQLite file (``~`` expanded, relative to the config file's folder); ``url``
    a Redis server (``redis://[[user]:password@]host[:port][/db]``, ``rediss://`` or
    ``unix://``; the ``redis`` extra), which processes on several machines share: give every
    replica the same ``url`` and ``prefix``. ``path = ":memory:"`` (SQLite's own name for
    it) keeps the originals in this process's memory, bounded by ``max_bytes``, until it
    exits. Without ``path`` or ``url`` the library (the controller, the agent, ``ctxcompact
    replay``) keeps them in memory too, and ``ctxcompact proxy`` (and ``wrap``) opens its
    default file in the user's cache folder (:func:`~ctxcompact.store.default_store_path`).
    ``enabled = false`` turns every store off, that one included (``--no-store``), and
    recall with it. ``ttl`` (Redis only): seconds an entry lives after it was last stored
    (none by default: the ``max_bytes`` bound alone evicts).

    Example:
        >>> table = StoreConfig()
        >>> table.recall_on, table.disabled().recall_on
        (True, False)
    """

    # strict, as every table: TOML already has types.
    model_config = ConfigDict(extra="forbid", strict=True, validate_assignment=True)

    enabled: bool | None = None
    """``false``: no store at all, not even a default one; unset or ``true``: the store
    ``path`` and ``recall`` describe, or the caller's default."""
    path: str | None = Field(default=None, min_length=1)
    url: str | None = Field(default=None, min_length=1)
    prefix: str = Field(default="ctxcompact", pattern=r"^[A-Za-z0-9_.:-]{1,64}$")
    ttl: float | None = Field(default=None, gt=0)
    max_bytes: int = Field(default=DEFAULT_MAX_BYTES, ge=1)
    recall: bool | None = None
    """``false``: plain markers and no recall tool; unset or ``true``: markers name their
    handles whenever there is a store (``true`` with ``enabled = false`` is an error)."""
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
        if self.enabled is False and (self.configured or self.recall):
            key = "path" if self.path is not None else "url" if self.url is not None else "recall"
            raise ValueError(f"enabled = false turns the store off, but {key} asks for one")
        return self

    @property
    def configured(self) -> bool:
        """Whether the table names a store itself (a ``path`` or a ``url``)."""
        return self.path is not None or self.url is not None

    @property
    def recall_on(self) -> bool:
        """Whether markers name their handles (and the recall tool is offered) when there is
        a store: unless ``recall = false`` or ``enabled = false``."""
        return self.recall is not False and self.enabled is not False

    def disabled(self) -> StoreConfig:
        """This table with every store turned off (``--no-store``)."""
        return StoreConfig(
            enabled=False, max_bytes=self.max_bytes, recall_placeholder=self.recall_placeholder
        )

    @property
    def in_memory(self) -> bool:
        """``path = ":memory:"``: a :class:`~ctxcompact.store.MemoryStore`, no file."""
        return self.path == MEMORY_PATH

    def resolved_path(self, config_path: Path | None) -> Path | None:
        """``path`` with ``~`` expanded, relative to the config file's folder (``None`` for
        ``":memory:"``)."""
        if self.path is None or self.in_memory:
            return None
        path = Path(self.path).expanduser()
        if not path.is_absolute() and config_path is not None:
            path = config_path.parent / path
        return path

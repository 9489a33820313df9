"""Where the proxy keeps its originals by default: a SQLite file in the user's cache folder."""

from __future__ import annotations

from pathlib import Path

import platformdirs

__all__ = ["DEFAULT_STORE_FILE", "default_store_path"]

DEFAULT_STORE_FILE = "originals.db"
"""The default store's file name, in :func:`default_store_path`'s folder."""


def default_store_path() -> Path:
    """The SQLite file ``ctxcompact proxy`` keeps originals in when ``[store]`` names none.

    The user's cache folder (platformdirs' ``user_cache_dir("ctxcompact")``): on Linux
    ``$XDG_CACHE_HOME/ctxcompact`` (``~/.cache/ctxcompact``), on macOS
    ``~/Library/Caches/ctxcompact``, on Windows ``%LOCALAPPDATA%\\ctxcompact\\Cache``. What is
    there can be deleted at any time, which is right for originals kept so a model can
    read them back: :class:`~ctxcompact.store.SQLiteStore` creates the file 0600 and the
    folders 0700, and bounds it by ``max_bytes``.

    Example:
        >>> default_store_path().name
        'originals.db'
    """
    folder = platformdirs.user_cache_dir("ctxcompact", appauthor=False)
    return Path(folder) / DEFAULT_STORE_FILE

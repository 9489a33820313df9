"""ctxcompact-supersede: a third-party ctxcompact strategy, installed as its own package.

It masks tool results that a later call of the same tool superseded (an older read of a file
that was read again). Name it in a ctxcompact config as ``supersede`` (its entry point) or as
``ctxcompact_supersede:SupersededReadMasking``.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from ._masking import DEFAULT_PLACEHOLDER, DEFAULT_TOOLS, PLACEHOLDER_FIELDS, SupersededReadMasking

try:
    __version__ = version("ctxcompact-supersede")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0"

__all__ = [
    "DEFAULT_PLACEHOLDER",
    "DEFAULT_TOOLS",
    "PLACEHOLDER_FIELDS",
    "SupersededReadMasking",
    "__version__",
]

from __future__ import annotations

import sys
from pathlib import Path

# Tests import their shared helpers as `tests.traces`, `tests.gen`, ... from the repo root.
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# The real llama.cpp and Redis server fixtures, session-scoped: defined once here so every
# module that asks for one shares one server (a fixture imported into two modules would start
# two).
import logging  # noqa: E402

import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

# No per-example deadline: CI runs on a busy 2-core machine, where a slow example is load,
# not a bug (a property that fails does so whatever the time it takes).
settings.register_profile("ctxcompact", deadline=None)
settings.load_profile("ctxcompact")

from tests.helpers.llama_server import llama_server  # noqa: E402, F401
from tests.helpers.otel import spans  # noqa: E402, F401
from tests.helpers.redis_server import redis_server  # noqa: E402, F401


@pytest.fixture(autouse=True)
def _restore_ctxcompact_logging() -> object:
    """The CLI's main() sets the ``ctxcompact`` logger's level and handlers, as a process
    should; in-process CLI tests must not leave that to the tests that run after them."""
    logger = logging.getLogger("ctxcompact")
    level, handlers = logger.level, list(logger.handlers)
    yield
    logger.setLevel(level)
    logger.handlers[:] = handlers


@pytest.fixture(autouse=True)
def _private_cache_folder(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The proxy keeps its default store in the user's cache folder: each test gets a cache
    folder of its own, so no test writes to the real one or sees another's originals."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))

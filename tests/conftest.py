from __future__ import annotations

import sys
from pathlib import Path

# Tests import their shared helpers as `tests.traces`, `tests.gen`, ... from the repo root.
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# The real llama.cpp server fixture, session-scoped: defined once here so every module that
# asks for it shares one server (a fixture imported into two modules would start two).
from tests.llama_server import llama_server  # noqa: E402, F401

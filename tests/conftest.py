from __future__ import annotations

import sys
from pathlib import Path

# Tests import their shared helpers as `tests.traces`, `tests.gen`, ... from the repo root.
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

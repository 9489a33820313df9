"""``python -m ctxcompact``: the command line (same as the ``ctxcompact`` script)."""

from __future__ import annotations

from ctxcompact.cli import main

raise SystemExit(main())

"""The layers of DESIGN.md hold: import-linter checks the contracts of ``pyproject.toml`` over
the real import graph (``TYPE_CHECKING`` imports included), and a break fails the suite."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(*, pythonpath: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if pythonpath is not None:  # another copy of the package, found before the installed one
        env["PYTHONPATH"] = str(pythonpath)
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo", "--config", str(ROOT / "pyproject.toml")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def installed() -> None:
    if not LINT_IMPORTS.exists():
        pytest.fail(f"{LINT_IMPORTS} is missing: install the dev extra (import-linter)")


@pytest.mark.usefixtures("installed")
def test_every_layer_contract_is_kept() -> None:
    result = lint_imports()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 2 kept, 0 broken." in result.stdout


@pytest.mark.usefixtures("installed")
def test_the_engine_importing_the_wiring_breaks_the_contracts(tmp_path: Path) -> None:
    # A copy of the package whose controller reaches the composition root inside a function:
    # the kind of import a from_config written the old way needs.
    shutil.copytree(
        ROOT / "src" / "ctxcompact",
        tmp_path / "ctxcompact",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    controller = tmp_path / "ctxcompact" / "_controller" / "controller.py"
    controller.write_text(
        controller.read_text(encoding="utf-8")
        + "\n\ndef _build_from(config: object) -> object:\n"
        + "    from .._wiring import wire\n\n"
        + "    return wire(config)  # type: ignore[arg-type]\n",
        encoding="utf-8",
    )
    result = lint_imports(pythonpath=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Contracts: 0 kept, 2 broken." in result.stdout
    assert "ctxcompact._controller.controller -> ctxcompact._wiring" in result.stdout

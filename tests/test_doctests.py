"""The docstrings' examples run under plain ``pytest`` (``--doctest-modules`` on ``src/``), and
an example that needs a missing optional extra is skipped saying which, never dropped or failed.

The skips are the root ``conftest.py``'s; these tests run pytest in a subprocess with an SDK
made unimportable, as on a machine without the extra.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_pytest(*args: str, blocked: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if blocked is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(blocked), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def block(tmp_path: Path, name: str) -> Path:
    """A folder that, first on the path, makes ``import name`` fail as if not installed."""
    folder = tmp_path / "blocked"
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.py").write_text(
        f"raise ModuleNotFoundError(\"No module named '{name}'\", name={name!r})\n",
        encoding="utf-8",
    )
    return folder


def test_plain_pytest_collects_the_doctests_of_src() -> None:
    result = run_pytest("--collect-only", "src/ctxcompact/kit", "src/ctxcompact/strategies")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ctxcompact.kit._groups.batched_boundary" in result.stdout
    assert "ctxcompact.strategies._pipeline.Pipeline" in result.stdout


def test_a_module_whose_extra_is_missing_is_skipped_naming_the_extra(tmp_path: Path) -> None:
    result = run_pytest("src/ctxcompact/llm", blocked=block(tmp_path, "openai"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"\d+ passed, \d+ skipped", result.stdout)  # the others still run
    assert "doctests need the 'openai' extra" in result.stdout  # llm/openai.py, whole
    assert "pip install 'ctxcompact[openai]'" in result.stdout


def test_an_example_that_needs_a_missing_extra_is_skipped_naming_it(tmp_path: Path) -> None:
    module = tmp_path / "example_mod.py"
    module.write_text(
        'def f():\n    """\n    >>> from ctxcompact.exceptions import MissingDependencyError\n'
        '    >>> raise MissingDependencyError("TiktokenCounter", "tiktoken")\n    """\n',
        encoding="utf-8",
    )
    result = run_pytest("-p", "conftest", "--doctest-modules", str(module))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 skipped" in result.stdout
    assert "pip install 'ctxcompact[tiktoken]'" in result.stdout


def test_any_other_import_error_still_fails(tmp_path: Path) -> None:
    module = tmp_path / "broken_mod.py"
    module.write_text('"""\n>>> 1\n1\n"""\nimport no_such_module_ctxcompact\n', encoding="utf-8")
    result = run_pytest("-p", "conftest", "--doctest-modules", str(module))
    assert result.returncode != 0
    assert "no_such_module_ctxcompact" in result.stdout
    assert "skipped" not in result.stdout

"""The documentation site: it builds with ``mkdocs build --strict``, its API reference holds
every public name with its docstring, its configuration page every TOML key, and a real browser
(headless Chromium, from Debian's ``chromium`` package) renders its pages as something other than
a blank screen.

The site is built once per session into a temporary folder (about 10-20 s).
"""

from __future__ import annotations

import contextlib
import functools
import html
import importlib
import importlib.util
import inspect
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType

import pytest

from conftest import missing_extra  # the root conftest: which extra an import error lacks
from tests.test_public_api import public_modules

ROOT = Path(__file__).resolve().parents[1]
HOOKS = ROOT / "docs" / "_hooks"
PROTOCOLS = ("CompactionStrategy", "LLM", "TokenCounter")
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def hook(name: str) -> ModuleType:
    """A module of ``docs/_hooks`` (build code, not a package), imported from its file."""
    spec = importlib.util.spec_from_file_location(f"docs_hooks_{name}", HOOKS / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built as CI builds it: ``mkdocs build --strict``."""
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("MkDocs is not installed: pip install -e '.[docs]'")
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stderr[-5000:]}"
    return out


def page_text(site: Path, page: str) -> str:
    return (site / page / "index.html").read_text(encoding="utf-8")


def section(page: str, anchor: str) -> str:
    """The HTML from the heading with id ``anchor`` to the next documented object's heading."""
    start = page.index(f'id="{anchor}"')
    following = page.find('class="doc doc-heading"', start + len(anchor) + 20)
    return page[start : following if following != -1 else len(page)]


def plain(fragment: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


# -- the reference covers the public API ------------------------------------------------------


DOCUMENTED = [m for m in public_modules() if m != "ctxcompact.integrations"]


@pytest.mark.parametrize("module_name", DOCUMENTED)
def test_every_public_name_appears_in_the_api_reference_with_its_docstring(
    site: Path, module_name: str
) -> None:
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:  # pydantic-ai on Python 3.10: its page is built, not importable
        extra = missing_extra(exc)
        if extra is None:
            raise
        pytest.skip(f"{module_name} needs the '{extra}' extra: pip install 'ctxcompact[{extra}]'")
    assert module.__all__, module_name
    page = page_text(site, f"reference/{module_name}")
    missing, undocumented = [], []
    as_rendered = hook("griffe_examples").markdown_docstring  # what the page shows
    for name in module.__all__:
        if name.startswith("__"):
            continue
        anchor = f"{module_name}.{name}"
        if f'id="{anchor}"' not in page:
            missing.append(name)
            continue
        value = getattr(module, name)
        if inspect.isclass(value) or inspect.isroutine(value):
            first = as_rendered(inspect.getdoc(value) or "").strip().splitlines()[0]
            words = re.findall(r"[A-Za-z]{4,}", first)[:4]
            text = plain(section(page, anchor))
            if not all(word in text for word in words):
                undocumented.append(name)
    assert missing == [], f"{module_name}: not in the API reference"
    assert undocumented == [], f"{module_name}: shown without its docstring"


def test_the_integrations_package_has_nothing_of_its_own_to_document() -> None:
    integrations = importlib.import_module("ctxcompact.integrations")
    assert integrations.__all__ == []  # each framework's module has its page


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_protocols_users_implement_show_a_worked_example(site: Path, protocol: str) -> None:
    text = section(page_text(site, "reference/ctxcompact"), f"ctxcompact.{protocol}")
    assert "Examples:" in plain(text)
    code = re.findall(r'<div class="highlight">(.*?)</div>', text, re.S)
    assert code, f"{protocol}: its example is not rendered as code"
    # >>> prompts highlighted as a Python console session, and a class of the reader's own.
    assert '<span class="gp">&gt;&gt;&gt; </span>' in code[0]
    assert "class " in plain(code[0])


def test_docstrings_are_read_as_markdown() -> None:
    convert = hook("griffe_examples").markdown_docstring
    assert convert("Example:\n    >>> 1\n    1") == "Examples:\n    >>> 1\n    1"
    assert convert("A :class:`~ctxcompact.LLM` or :func:`ctxcompact.wire`.") == (
        "A `LLM` or `ctxcompact.wire`."
    )
    assert convert("For example::\n\n    x = 1\n\nThen.") == (
        "For example:\n\n```python\nx = 1\n```\n\nThen."
    )


# -- the configuration page lists every key ---------------------------------------------------


def test_the_configuration_page_lists_every_key_of_the_config_models(site: Path) -> None:
    from ctxcompact import Config

    reference = hook("config_reference")
    tables = reference.config_tables()
    listed = {f"{t.name}.{k.name}".lstrip(".") for t in tables for k in t.keys}
    # Every leaf of the models, walked independently of the hook.
    assert listed >= {
        "compaction.max_context_size",
        "compaction.llm.breaker_cooldown",
        "observation_masking.schema1.window_turns",
        "context_guard.drop_batch",
        "store.recall_placeholder",
        "pricing.<name>.ttl_seconds",
        "agent.llm.provider",
        "models",
    }
    assert len(listed) >= len(Config.model_fields) + 50
    page = page_text(site, "guides/configuration")
    for table in tables:
        if not table.keys:
            continue
        heading = "Top level" if not table.name else f"[{table.name}]"
        start = plain(page).index(heading)
        assert heading in plain(page), heading
        for key in table.keys:
            assert f"<code>{key.name}</code>" in page, f"{table.name}.{key.name}"
        assert start >= 0
    assert reference.MARKER not in page


def test_a_key_without_a_description_fails_the_build(tmp_path: Path) -> None:
    reference = hook("config_reference")
    example = tmp_path / "config.example.toml"
    text = (ROOT / "config.example.toml").read_text(encoding="utf-8")
    # Remove the comment above [proxy] port: the key is then undocumented.
    text = text.replace("# Port to listen on (0-65535; 0 picks a free port; default 8787).\n", "")
    example.write_text(text, encoding="utf-8")
    reference.EXAMPLE = example
    with pytest.raises(ValueError, match=r"'proxy.port' has no description"):
        reference.config_tables()


# -- the README links into the site ----------------------------------------------------------

_LINK = re.compile(r"\]\(([^)\s]+)\)")


def readme_links(text: str) -> list[tuple[str, str]]:
    """The README's links to files of the checkout: ``(path, anchor)``, anchor ``""`` if none."""
    found = []
    for target in _LINK.findall(text):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        found.append((path, anchor))
    return found


def test_the_readme_links_resolve_to_files_and_to_headings_of_the_built_site(site: Path) -> None:
    # mkdocs --strict checks the pages' links; nothing checks the README's but this test, and an
    # anchor left behind by a move is exactly what breaks silently on GitHub.
    links = readme_links((ROOT / "README.md").read_text(encoding="utf-8"))
    assert len({path for path, _ in links if path.startswith("docs/")}) >= 10
    for path, anchor in links:
        assert path, f"README.md links to #{anchor}: the README has no sections to link to"
        assert (ROOT / path).exists(), f"README.md links to {path}, which does not exist"
        if anchor:
            page = Path(path).relative_to("docs").with_suffix("")
            built = page_text(site, page.as_posix().removesuffix("/index").removesuffix("index"))
            assert f'id="{anchor}"' in built, f"README.md: {path} has no heading #{anchor}"


def test_readme_links_are_read_as_path_and_anchor_and_web_addresses_left_out() -> None:
    text = "[a](docs/guides/proxy.md#no-such-heading) [b](https://example.org) [c](LICENSE)"
    assert readme_links(text) == [("docs/guides/proxy.md", "no-such-heading"), ("LICENSE", "")]


def table_rows(text: str, header: str) -> dict[str, list[str]]:
    """The rows of the Markdown table whose header line starts with ``header``, by first cell."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows: dict[str, list[str]] = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        rows[cells[0]] = cells[1:]
    return rows


# README row -> the row of the full replay table it quotes (docs/guides/strategies.md).
HEADLINE = {
    "`tool-result-hiding`, 5 newest turns kept": "hiding n=5",
    "`schema1-masking`, window 5": "masking window=5 (every turn)",
    "`tool-result-truncation`, 8,000 characters": "truncation max 8000 chars",
    (
        "`ContextGuard(context_window=16000, reserve_tokens=4000)`: drops old turns to fit, "
        "errors included"
    ): "context guard, context_window=16000 (fill 1)",
}


def test_the_readme_headline_figures_are_those_of_the_replay_table() -> None:
    # The README quotes a few rows of one table; a change of the figures lands in the table
    # (the one source) and this test says which README row still shows the old ones.
    readme = table_rows((ROOT / "README.md").read_text(encoding="utf-8"), "| configuration |")
    full = table_rows(
        (ROOT / "docs/guides/strategies.md").read_text(encoding="utf-8"), "| configuration |"
    )
    recommended = next(label for label in full if "recommended.toml" in label)
    quoted = {**HEADLINE, **{k: recommended for k in readme if "recommended.toml" in k}}
    assert set(readme) == set(quoted), "a README row that quotes no row of the replay table"
    for row, source in quoted.items():
        input_, cost, anthropic, *_, referenced = full[source]
        assert readme[row] == [input_, cost, anthropic, referenced], (row, full[source])


# -- a real browser renders the pages ---------------------------------------------------------


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


@contextlib.contextmanager
def serve(folder: Path) -> Iterator[str]:
    """The site over HTTP on 127.0.0.1, a free port, until the block ends."""
    handler = functools.partial(QuietHandler, directory=str(folder))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def render(browser: str, url: str, out: Path, profile: Path) -> str:
    """Screenshot ``url`` into ``out`` and return the DOM after scripts ran."""
    common = [
        browser,
        *CHROMIUM_FLAGS,
        f"--user-data-dir={profile}",
        "--window-size=1280,1600",
        "--virtual-time-budget=15000",
    ]
    shot = subprocess.run(
        [*common, f"--screenshot={out}", url], capture_output=True, timeout=120, check=False
    )
    assert shot.returncode == 0, shot.stderr.decode(errors="replace")[-2000:]
    assert out.is_file()
    dom = subprocess.run(
        [*common, "--dump-dom", url], capture_output=True, text=True, timeout=120, check=False
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    return dom.stdout


PAGES = {
    "": "ctxcompact",
    "guides/configuration/": "Configuration",
    "reference/ctxcompact.testing/": "ctxcompact.testing",
}


def test_the_home_page_a_guide_and_an_api_page_render_in_chromium(
    site: Path, tmp_path: Path
) -> None:
    browser = chromium()
    if browser is None:
        pytest.skip("Chromium is not installed (Debian: apt-get install chromium)")
    from PIL import Image, ImageStat

    with serve(site) as base:
        for k, (path, heading) in enumerate(PAGES.items()):
            png = tmp_path / f"page{k}.png"
            dom = render(browser, f"{base}/{path}", png, tmp_path / f"profile{k}")
            h1 = re.search(r"<h1[^>]*>(.*?)</h1>", dom, re.S)
            assert h1 is not None, f"{path}: no <h1> in the rendered page"
            assert heading in plain(h1[1]), f"{path}: heading {plain(h1[1])!r}"
            assert 'class="md-nav' in dom, f"{path}: the theme's navigation is missing"
            image = Image.open(png).convert("L")
            assert image.size == (1280, 1600)
            spread = ImageStat.Stat(image).stddev[0]
            inked = sum(image.histogram()[:200]) / (image.width * image.height)
            # A blank or unstyled page is one colour; a rendered one has text, a header bar
            # and code blocks: measured 40-80 of spread and 8-20% of dark pixels.
            assert spread > 20, f"{path}: the screenshot is nearly uniform ({spread:.1f})"
            assert inked > 0.03, f"{path}: almost nothing drawn ({inked:.1%} dark pixels)"

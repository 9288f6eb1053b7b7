"""The docs site (mkdocs.yml) has a front door and no broken link (issue 41): ``mkdocs build
--strict`` into a temporary directory, then every page's internal links, anchors and assets
resolve to files of the site, the logo and "Home" lead to the index page, and (``browser``
tier, headless Chromium) every page loads over HTTP without a failed request."""

from __future__ import annotations

import http.server
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from tests.docs.blocks import DOCS, ROOT, blocks


class _Page(HTMLParser):
    """A page's ids and its links (tag, attribute, URL, classes)."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[tuple[str, str, str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if "id" in a:
            self.ids.add(a["id"])
        for key in ("href", "src"):
            if key in a and not (tag == "link" and a.get("rel") in ("canonical", "alternate")):
                self.links.append((tag, key, a[key], a.get("class", "")))


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def _target(site: Path, page: Path, path: str) -> Path:
    """The file a link's path leads to (a directory: its index.html)."""
    base = site if path.startswith("/") else page.parent
    target = (base / unquote(path).lstrip("/")).resolve()
    return target / "index.html" if target.is_dir() else target


def test_the_index_quick_start_is_the_readmes():
    (readme,) = [b.code for b in blocks(ROOT / "README.md") if b.lang == "bash"][:1]
    index = [b.code for b in blocks(DOCS / "index.md") if b.lang == "bash"]
    assert readme in index


@pytest.mark.slow
def test_every_internal_link_anchor_and_asset_resolves(site):
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 25 and (site / "index.html").exists()
    parsed = {p.resolve(): _parse(p) for p in pages}
    broken = []
    checked = 0
    for page, html in parsed.items():
        for tag, _, url, _ in html.links:
            parts = urlsplit(url)
            if parts.scheme or parts.netloc or url.startswith(("mailto:", "data:")):
                continue
            checked += 1
            target = _target(site, page, parts.path) if parts.path else page
            where = f"{page.relative_to(site.resolve())}: <{tag}> {url}"
            if not target.is_file():
                broken.append(f"{where}: no {target.relative_to(site.resolve())}")
            elif parts.fragment and target.suffix == ".html":
                ids = parsed[target].ids if target in parsed else _parse(target).ids
                if unquote(parts.fragment) not in ids:
                    broken.append(f"{where}: no anchor #{parts.fragment}")
    assert checked > 1000
    assert not broken, "\n".join(broken)


@pytest.mark.slow
def test_the_logo_and_home_lead_to_the_index_page(site):
    index = (site / "index.html").resolve()
    for page in sorted(site.rglob("*.html")):
        if page.name == "404.html":  # served at any depth: root-relative links, checked above
            continue
        links = _parse(page).links
        logos = [url for tag, _, url, cls in links if tag == "a" and "md-logo" in cls]
        assert logos, page
        for url in logos:
            assert _target(site, page.resolve(), urlsplit(url).path) == index, (page, url)
    html = (site / "index.html").read_text()
    assert "<h1" in html and "Quick start" in html and "orchestrator" in html


# -- a real browser ------------------------------------------------------------------------


class _Quiet(http.server.SimpleHTTPRequestHandler):
    failures: list[str]

    def log_message(self, format: str, *args: object) -> None:
        pass

    def send_response(self, code: int, message: str | None = None) -> None:
        # /favicon.ico: a browser's own guess; the pages declare their icon (checked above)
        if code >= 400 and self.path != "/favicon.ico":
            self.failures.append(f"{code} {self.path}")
        super().send_response(code, message)


@pytest.fixture
def served(site: Path) -> Iterator[tuple[str, list[str]]]:
    failures: list[str] = []

    class Handler(_Quiet):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, directory=str(site), **kwargs)  # type: ignore[arg-type]

    Handler.failures = failures
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", failures
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.timeout(600)  # one Chromium start per page (~1-2 s each on 2 cores)
def test_every_page_loads_in_headless_chromium(site, served, tmp_path):
    """Each page in Chromium (``--dump-dom``: loaded, scripts run): the rendered page has its
    title and navigation, and no request the browser made (styles, scripts, images, fonts,
    the search index) failed."""
    base, failures = served
    chromium = shutil.which("chromium")
    assert chromium is not None
    pages = sorted(p for p in site.rglob("index.html"))
    assert len(pages) > 25
    browser = [
        chromium,
        "--headless",
        "--no-sandbox",  # CI runs as root
        "--disable-gpu",
        "--disable-dev-shm-usage",  # containers' small /dev/shm
        # no network but loopback here: no background fetches, updates, sync or QUIC probes
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-quic",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--dump-dom",
    ]
    problems = []
    for page in pages:
        path = page.parent.relative_to(site).as_posix()
        url = f"{base}/{'' if path == '.' else path + '/'}"
        done = subprocess.run(
            [*browser, "--virtual-time-budget=3000", url],
            capture_output=True,
            text=True,
            timeout=60,
        )
        dom = done.stdout
        if done.returncode != 0 or "md-nav" not in dom or "<h1" not in dom:
            problems.append(f"{url}: exit {done.returncode}, {len(dom)} bytes of DOM")
    assert not problems, "\n".join(problems)
    assert not failures, failures

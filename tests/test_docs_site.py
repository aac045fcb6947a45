"""The built site in a real browser (headless Chromium, 1280 px wide): every image on a page loads,
and no table is wider than the content column; screenshots of the home page and a paper page.

Collapsible blocks are opened before measuring. Pages are measured from a small harness page
served beside the site: it loads each page in a 1280 px iframe of the same origin, measures it once
loaded, and writes the result into its own DOM, which `chromium --dump-dom` prints. Screenshots go
to pytest's temporary folder (`--basetemp=DIR` keeps them in DIR)."""

from __future__ import annotations

import functools
import html
import http.server
import importlib.util
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import threading

import pytest

from helpers import ROOT

CHROMIUM = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)

needs_browser = pytest.mark.skipif(CHROMIUM is None or importlib.util.find_spec("mkdocs") is None,
                                   reason="needs Chromium (apt-get install chromium) and mkdocs (the docs extra)")
SNIPPET = "docs/snippets/from_python.py"

WIDTH = 1280
#: Pages measured and photographed: the home page, the paper page with the widest tables, and the
#: pages of DPT, XLand and long contexts.
PAGES = {"home": "", "headless-ad": "papers/headless-ad/", "dpt": "papers/dpt/", "xland": "xland/",
         "long-contexts": "guides/long-contexts/"}

HARNESS = """<!doctype html><html><body>
<iframe id="page" style="width: %(width)dpx; height: 2000px; border: 0"></iframe>
<pre id="result">pending</pre>
<script>
const frame = document.getElementById("page");
frame.onload = () => {
  const doc = frame.contentDocument;
  doc.querySelectorAll("details").forEach(d => { d.open = true; });  // what a reader opens must fit too
  const column = doc.querySelector(".md-content__inner");
  const limit = column.getBoundingClientRect().right + 1;
  const images = [...doc.images].map(img => ({src: img.getAttribute("src"),
    loaded: img.complete && img.naturalWidth > 0, width: img.getBoundingClientRect().width}));
  const tables = [...column.querySelectorAll("table")].filter(t => t.offsetParent !== null).map(t => {
    const wrap = t.closest(".md-typeset__scrollwrap") || t;
    return {header: t.rows[0].innerText.slice(0, 80).replace(/\\s+/g, " "),
            right: t.getBoundingClientRect().right, limit: limit,
            scrolls: t.scrollWidth > t.clientWidth + 1 || wrap.scrollWidth > wrap.clientWidth + 1};
  });
  document.getElementById("result").textContent = JSON.stringify(
    {column: column.getBoundingClientRect().width, images: images, tables: tables});
};
frame.src = new URLSearchParams(location.search).get("page");
</script></body></html>"""


def test_one_from_python_block():
    """The README's Python block (which tests/test_docs.py runs) is the snippet the site's pages
    include, so the two cannot drift apart."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        blocks = re.findall(r"^```python\n(.*?)^```", f.read(), flags=re.S | re.M)
    with open(os.path.join(ROOT, SNIPPET), encoding="utf-8") as f:
        assert blocks == [f.read()]
    for page in ("index.md", "getting-started.md"):
        with open(os.path.join(ROOT, "docs", page), encoding="utf-8") as f:
            assert f'```python\n--8<-- "{SNIPPET}"\n```' in f.read(), page


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site built into a temporary folder (strictness is tests/test_docs.py's), served on
    127.0.0.1; yields its base URL."""
    folder = tmp_path_factory.mktemp("site")
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "-q", "-d", str(folder)],
                         cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    (folder / "_measure.html").write_text(HARNESS % {"width": WIDTH})
    handler = functools.partial(QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    thread.join()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def chromium(*args: str) -> subprocess.CompletedProcess:
    """Headless Chromium with a fresh profile (root needs --no-sandbox)."""
    with tempfile.TemporaryDirectory() as profile:
        command = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                   "--no-first-run", "--disable-extensions", f"--user-data-dir={profile}", *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=300)


def measure(base: str, page: str) -> dict:
    out = chromium("--virtual-time-budget=15000", "--dump-dom",
                   f"{base}_measure.html?page=/{page}")
    match = re.search(r'<pre id="result">(.*?)</pre>', out.stdout, flags=re.S)
    assert match and match.group(1) != "pending", f"no measurement of /{page}: {out.stderr[-2000:]}"
    return json.loads(html.unescape(match.group(1)))


@needs_browser
@pytest.mark.parametrize("name", list(PAGES))
def test_page_images_load_and_tables_fit(site, name):
    result = measure(site, PAGES[name])
    assert result["column"] > 600, result["column"]
    assert result["images"], f"/{PAGES[name]} shows no image"
    broken = [i["src"] for i in result["images"] if not i["loaded"]]
    assert not broken, f"images that did not load on /{PAGES[name]}: {broken}"
    wide = [f"{t['header']!r} (right edge {t['right']:.0f} px, column ends at {t['limit']:.0f} px, "
            f"scrolls: {t['scrolls']})" for t in result["tables"]
            if t["scrolls"] or t["right"] > t["limit"]]
    assert not wide, f"tables wider than the content column on /{PAGES[name]}:\n" + "\n".join(wide)


@needs_browser
@pytest.mark.parametrize("name", list(PAGES))
def test_screenshot_at_1280_px(site, tmp_path, name):
    path = tmp_path / f"{name}.png"
    chromium(f"--window-size={WIDTH},2000", "--virtual-time-budget=15000", f"--screenshot={path}",
             site + PAGES[name])
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", head[16:24]) == (WIDTH, 2000)

"""Open the rendered book in headless Chromium and check what a reader would see.

For every chapter listed in ``_toc.yml`` the page is served from ``_build/html`` by a
local ``http.server`` (127.0.0.1, a thread of this process) and loaded once in Debian's
Chromium, driven by selenium through ``/usr/bin/chromedriver`` (never a downloaded
driver: ``SE_OFFLINE=true``). One visit collects a report; the tests then check it:

* math is typeset: every ``.math`` node holds a MathJax ``mjx-container``, MathJax
  reported no error, and no raw TeX delimiters (``$$``, ``$...$``, ``\\(``, ...) are left
  in the page text outside code blocks;
* every ``<img>`` loaded (``naturalWidth > 0``);
* every kernel-free plotly explorer responds to a real mouse click on each of its slider
  rails: the slider's active step changes and so do the traces that step restyles, to
  exactly what it declares (the visible set, or the curves of the traces it names);
* the page raised no JavaScript error (``window.onerror``, unhandled rejections,
  ``console.error`` and Chromium's own SEVERE log, e.g. a missing script);
* nothing is wider than the text column, at a 1400 and a 1280 px wide window with the
  theme's default layout (both sidebars): no code block or printed output scrolls
  sideways (``scrollWidth > clientWidth``), and no table or plotly figure reaches past
  the column. Collapsed cells and solutions are opened first, since a reader opens them.
  The report names the page, the section and the first line that does not fit. An
  output that is meant to scroll carries the cell tag ``wide-output`` (a visible box,
  book/_static/sapo_lab.css) and is allowed. Display equations are measured too: one that
  runs past the column (cut, or scrolling inside its box) is reported with its TeX;
* no page scrolls sideways on a phone: at a 390 px wide mobile viewport the document is no
  wider than the screen, and the report names the widest elements that stick out;
* on the same phone, every number in a table (``−0.075``, each end of ``[−0.124, −0.026]``,
  ``4,808``, ``5e-05``) is drawn on one line: its characters' boxes share one line top;
* on the same phone, the explorers of chapters 5 and 7: the plotly modebar covers no title,
  axis title or legend, and every slider's rail is at least 250 px wide.

Screenshots of two chapters go to ``_build/screenshots/``.

Run with ``make browser`` or ``pytest -m browser tests/book/test_browser.py``. Chromium comes
from ``tools/install_chromium.sh``; without it the tests skip. If ``_build/html`` is
missing they build the book first (``make book-html``). ``SAPO_LAB_BOOK_HTML=DIR``
points them at another built copy.
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import warnings
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
HTML = Path(os.environ.get("SAPO_LAB_BOOK_HTML", ROOT / "_build" / "html")).resolve()
SCREENSHOTS = ROOT / "_build" / "screenshots"
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--window-size=1280,1000",
)
SCREENSHOT_PAGES = ("book/05_soft_surrogate.html", "book/10_loss_implementation.html")
WAIT_S = 30.0
DEFAULT_WIDTH, HEIGHT = 1280, 1000
LAPTOP_WIDTHS = (1400, 1280)


def toc_pages() -> list[str]:
    """The chapter pages, in book order, as paths relative to the HTML root."""
    import yaml

    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]

    def walk(entries):
        for entry in entries or ():
            if "file" in entry:
                files.append(entry["file"])
            walk(entry.get("sections"))

    for part in toc.get("parts", [{"chapters": toc.get("chapters")}]):
        walk(part.get("chapters"))
    return [f + ".html" for f in files]


PAGES = toc_pages()

# Installed before any page script runs: records uncaught errors, rejections and console.error.
ERROR_COLLECTOR = r"""
window.__sapoErrors = [];
window.addEventListener('error', e => window.__sapoErrors.push(
    'error: ' + (e.message || (e.target && (e.target.src || e.target.href)) || String(e))), true);
window.addEventListener('unhandledrejection', e => window.__sapoErrors.push('unhandled rejection: ' + e.reason));
(function () {
  const original = console.error;
  console.error = function (...args) {
    window.__sapoErrors.push('console.error: ' + args.map(String).join(' '));
    return original.apply(this, args);
  };
})();
"""

WAIT_FOR_MATHJAX = r"""
const done = arguments[arguments.length - 1];
const start = Date.now();
(function poll() {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    MathJax.startup.promise.then(() => done('ok'), e => done('MathJax failed: ' + e));
  } else if (Date.now() - start > arguments_timeout) {
    done('MathJax never started');
  } else {
    setTimeout(poll, 100);
  }
})();
"""

MATH_REPORT = r"""
const math = Array.from(document.querySelectorAll('.math'));
const untypeset = math.filter(el => !el.querySelector('mjx-container')).map(el => el.textContent.slice(0, 80));
const clone = document.body.cloneNode(true);
clone.querySelectorAll('pre, code, script, style, textarea, mjx-container, .MathJax, .js-plotly-plot')
     .forEach(el => el.remove());
return {
  math_nodes: math.length,
  containers: document.querySelectorAll('mjx-container').length,
  untypeset: untypeset,
  errors: Array.from(document.querySelectorAll('mjx-merror, [data-mjx-error]'))
               .map(el => el.getAttribute('data-mjx-error') || el.textContent.slice(0, 80)),
  text: clone.textContent,
};
"""

IMAGE_REPORT = r"""
const imgs = Array.from(document.images);
return {pending: imgs.filter(i => !i.complete).length,
        total: imgs.length,
        broken: imgs.filter(i => i.complete && i.naturalWidth === 0).map(i => i.currentSrc || i.src)};
"""

SLIDER_FIGURES = r"""
return Array.from(document.querySelectorAll('.js-plotly-plot'))
  .filter(gd => gd._fullLayout && gd._fullLayout.sliders && gd._fullLayout.sliders.length)
  .map(gd => [gd.id, gd._fullLayout.sliders.length]);
"""

# Slider arguments[1] of figure arguments[0]: its active step, whether the traces now show what each step
# sets (a restyle of every trace, or of the traces the step names), and those traces' current state.
SLIDER_STATE = r"""
const gd = document.getElementById(arguments[0]);
const slider = gd._fullLayout.sliders[arguments[1]];
const plain = v => JSON.stringify(ArrayBuffer.isView(v) ? Array.from(v) : v);
const current = (trace, key) => {
  const v = gd.data[trace][key];
  return key === 'visible' ? String(v === undefined ? true : v) : plain(v);
};
const wanted = (v, key) => key === 'visible' ? String(v) : plain(v);
const traces = step => step.args[1] == null ? gd.data.map((_, i) => i) : step.args[1];
const keys = Object.keys(slider.steps[0].args[0]);
const matches = slider.steps.map(step => traces(step).every((t, j) => keys.every(key => {
  const value = step.args[0][key];
  return current(t, key) === wanted(Array.isArray(value) ? value[j] : value, key);
})));
return {active: slider.active, steps: slider.steps.length, matches,
        state: traces(slider.steps[0]).map(t => keys.map(key => current(t, key)).join('|')).join(';')};
"""

# Raw TeX that MathJax should have consumed (text outside code blocks only).
RAW_TEX = re.compile(r"\$\$|\\\(|\\\)|\\\[|\\\]|\\begin\{|\\frac|\$[^\s$][^$\n]{0,200}?[^\s$\\]\$")


def _build_book() -> None:
    if shutil.which("make") and (ROOT / "Makefile").exists():
        cmd = ["make", "book-html"]
    else:
        cmd = [str(ROOT / ".venv" / "bin" / "jupyter-book"), "build", ".", "-W", "-n", "--keep-going"]
    env = dict(os.environ, SAPO_LAB_BOOK="1")
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600)
    if not (HTML / "index.html").exists():
        pytest.fail(f"`{' '.join(cmd)}` did not produce {HTML}/index.html (exit {proc.returncode}):\n"
                    + (proc.stdout + proc.stderr)[-4000:])
    if proc.returncode:
        # -W turns any Sphinx warning into a failure; that is the build's own check (make book-html),
        # so here we only report it and test the pages that were written.
        warnings.warn(f"`{' '.join(cmd)}` exited {proc.returncode}:\n{(proc.stdout + proc.stderr)[-2000:]}",
                      stacklevel=1)


@pytest.fixture(scope="session")
def browser_tools():
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        message = f"{CHROMIUM} or {CHROMEDRIVER} is missing: run tools/install_chromium.sh to enable"
        if os.environ.get("SAPO_LAB_REQUIRE_BROWSER") == "1":   # set by .ci/run: CI must never skip this
            pytest.fail(message)
        pytest.skip(message)
    os.environ["SE_OFFLINE"] = "true"            # selenium must never fetch a driver
    return pytest.importorskip("selenium", reason="selenium is not installed (pip install selenium)")


@pytest.fixture(scope="session")
def site(browser_tools):
    """Base URL of the built book, served from a local thread."""
    if not (HTML / "index.html").exists():
        _build_book()

    class QuietHandler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(QuietHandler, directory=str(HTML))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="session")
def driver(browser_tools):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="sapo-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    drv = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    drv.set_page_load_timeout(60)
    drv.set_script_timeout(WAIT_S + 5)
    drv.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": ERROR_COLLECTOR})
    yield drv
    drv.quit()
    shutil.rmtree(profile, ignore_errors=True)


def _wait(predicate, timeout=WAIT_S, interval=0.1):
    end = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > end:
            return value
        time.sleep(interval)


# Messages that are not the book's fault, each matched exactly and explained.
KNOWN_BENIGN = (
    # pydata-sphinx-theme logs this on a fresh profile (no stored light/dark choice) and falls back to auto.
    "Got invalid theme mode: . Resetting to auto.",
    # jupyter-book 1.0.4 registers sphinx-thebe's inline config twice on every page, so its second
    # `const THEBE_JS_URL` fails; thebe (live code) is not used by this book. Upstream bug, not ours.
    "Identifier 'THEBE_JS_URL' has already been declared",
)


def _is_benign(message: str) -> bool:
    return any(known in message for known in KNOWN_BENIGN)


def _severe_log(drv) -> list[str]:
    out = []
    for entry in drv.get_log("browser"):
        if entry["level"] == "SEVERE" and "favicon.ico" not in entry["message"] and not _is_benign(entry["message"]):
            out.append(f"{entry['source']}: {entry['message']}")
    return out


def _click_slider(drv, gd_id: str, index: int, to_last: bool) -> None:
    """A real mouse click near one end of slider ``index``'s rail (plotly snaps to the first or last step)."""
    from selenium.webdriver.common.action_chains import ActionChains

    drv.execute_script("document.getElementById(arguments[0]).scrollIntoView({block: 'center'});", gd_id)
    rail = drv.execute_script("return document.getElementById(arguments[0])"
                              ".querySelectorAll('.slider-rail-touch-rect')[arguments[1]];", gd_id, index)
    drv.execute_script("arguments[0].scrollIntoView({block: 'center'});", rail)
    width = rail.size["width"]
    offset = int(width / 2) - 3
    ActionChains(drv).move_to_element_with_offset(rail, offset if to_last else -offset, 0).click().perform()


def _check_sliders(drv) -> list[dict]:
    results = []
    for gd_id, count in drv.execute_script(SLIDER_FIGURES):
        for index in range(count):
            before = drv.execute_script(SLIDER_STATE, gd_id, index)
            to_last = before["active"] != before["steps"] - 1
            target = before["steps"] - 1 if to_last else 0
            _click_slider(drv, gd_id, index, to_last)

            def settled(state, t=target):
                # Plotly moves the slider before its restyle lands: wait for both, not just the handle.
                return state if state["active"] == t and state["matches"][t] else None

            after = _wait(lambda g=gd_id, k=index: settled(drv.execute_script(SLIDER_STATE, g, k)), timeout=10) \
                or drv.execute_script(SLIDER_STATE, gd_id, index)
            results.append(dict(id=f"{gd_id}#{index}", before=before["active"], target=target,
                                after=after["active"], changed=after["state"] != before["state"],
                                matches_step=after["matches"][target]))
    return results


def _visit(drv, base: str, page: str) -> dict:
    _severe_log(drv)                                             # drop what an earlier page left behind
    drv.get(base + page)
    _wait(lambda: drv.execute_script("return document.readyState") == "complete")
    has_math = drv.execute_script("return document.querySelectorAll('.math').length > 0")
    mathjax = "no math on page"
    if has_math:
        mathjax = drv.execute_async_script(WAIT_FOR_MATHJAX.replace("arguments_timeout", str(int(WAIT_S * 1000))))
    _wait(lambda: drv.execute_script(IMAGE_REPORT)["pending"] == 0)
    _wait(lambda: drv.execute_script(
        "return Array.from(document.querySelectorAll('.plotly-graph-div')).every(g => g._fullLayout)"))
    report = dict(mathjax=mathjax, math=drv.execute_script(MATH_REPORT), images=drv.execute_script(IMAGE_REPORT))
    report["sliders"] = _check_sliders(drv)
    collected = drv.execute_script("return window.__sapoErrors || ['error collector missing']")
    report["js_errors"] = [e for e in collected if not _is_benign(e)]
    report["js_errors"] += _severe_log(drv)
    return report


def _page_cache(visit, driver, site):
    """``get(page)``: ``visit(driver, site, page)``'s report, measured once a session per page."""
    cache: dict[str, dict] = {}

    def get(page: str) -> dict:
        if page not in cache:
            if not (HTML / page).exists():
                pytest.fail(f"{page} is in _toc.yml but was not built into {HTML}")
            cache[page] = visit(driver, site, page)
        return cache[page]

    return get


@pytest.fixture(scope="session")
def reports(site, driver):
    return _page_cache(_visit, driver, site)


@pytest.mark.parametrize("page", PAGES)
def test_math_is_typeset(reports, page):
    r = reports(page)
    math = r["math"]
    if math["math_nodes"]:
        assert r["mathjax"] == "ok", r["mathjax"]
        assert not math["untypeset"], f"{len(math['untypeset'])} math nodes not typeset: {math['untypeset'][:5]}"
        assert math["containers"] >= math["math_nodes"]
    assert not math["errors"], f"MathJax errors: {math['errors'][:5]}"
    raw = sorted({m.group(0)[:60] for m in RAW_TEX.finditer(math["text"])})
    assert not raw, f"raw TeX left in the page text: {raw[:10]}"


@pytest.mark.parametrize("page", PAGES)
def test_images_load(reports, page):
    images = reports(page)["images"]
    assert images["pending"] == 0, f"{images['pending']} images still loading"
    assert not images["broken"], f"images with naturalWidth 0: {images['broken']}"


@pytest.mark.parametrize("page", PAGES)
def test_slider_explorers_respond(reports, page):
    sliders = reports(page)["sliders"]
    if not sliders:
        pytest.skip(f"{page} has no slider explorer")
    for s in sliders:
        assert s["after"] == s["target"], f"slider {s['id']}: active step {s['after']}, clicked {s['target']}"
        assert s["changed"] and s["matches_step"], f"slider {s['id']}: trace visibility did not follow: {s}"


@pytest.mark.parametrize("page", PAGES)
def test_no_javascript_errors(reports, page):
    errors = reports(page)["js_errors"]
    assert not errors, "JavaScript errors:\n" + "\n".join(errors[:20])


# ---- nothing wider than the column at a laptop width ----------------------------------------------------------

# Opens every collapsed cell and solution, then measures code blocks, printed outputs, tables and plotly
# figures against the article's text column. arguments[0]: selector of containers allowed to scroll.
OVERFLOW_REPORT = r"""
const allowed = arguments[0];
document.querySelectorAll('details').forEach(d => { d.open = true; });
document.querySelectorAll('.toggle-hidden').forEach(el => el.classList.remove('toggle-hidden'));
const article = document.querySelector('article.bd-article');
const columnRight = article.getBoundingClientRect().right - parseFloat(getComputedStyle(article).paddingRight);
const ctx = document.createElement('canvas').getContext('2d');
const clip = text => text.replace(/\s+$/, '').slice(0, 160);

function section(el) {
  const sec = el.closest('section');
  const h = sec && sec.querySelector('h1, h2, h3, h4');
  return h ? h.textContent.replace(/[#¶]/g, '').trim().slice(0, 80) : '';
}
function excess(el) {               // px of content a reader cannot see without scrolling sideways
  return Math.max(el.scrollWidth - el.clientWidth, el.getBoundingClientRect().right - columnRight);
}
function firstWideLine(pre) {       // the first line whose rendered width exceeds the block's text width
  const s = getComputedStyle(pre);
  ctx.font = s.font;
  const room = pre.clientWidth - parseFloat(s.paddingLeft) - parseFloat(s.paddingRight);
  const lines = pre.textContent.split('\n');
  let widest = 0;
  for (let i = 0; i < lines.length; i++) {
    const w = ctx.measureText(lines[i]).width;
    if (w > room + 0.5) return {line_no: i + 1, line: clip(lines[i]), chars: lines[i].length};
    if (w > ctx.measureText(lines[widest]).width) widest = i;
  }
  return {line_no: widest + 1, line: clip(lines[widest]), chars: lines[widest].length};
}

const found = [], counts = {code: 0, output: 0, table: 0, figure: 0, math: 0};
function record(el, kind, px, where) {
  counts[kind] += 1;
  if (px <= 1) return;
  found.push(Object.assign({kind, node: el, px: Math.round(px), section: section(el),
                            allowed: kind !== 'code' && kind !== 'math' && !!el.closest(allowed)}, where));
}
for (const pre of article.querySelectorAll('pre')) {
  record(pre, pre.closest('.cell_output') ? 'output' : 'code', excess(pre), firstWideLine(pre));
}
for (const table of article.querySelectorAll('table')) {
  const box = table.parentElement;
  const px = Math.max(table.getBoundingClientRect().width - box.clientWidth, excess(box), excess(table));
  const head = Array.from((table.rows[0] || {cells: []}).cells).map(c => c.textContent.trim());
  record(table, 'table', px, {line_no: 1, line: clip(head.join(' | ')), columns: head.length});
}
for (const gd of article.querySelectorAll('.js-plotly-plot')) {
  const drawn = gd._fullLayout ? gd._fullLayout.width : gd.getBoundingClientRect().width;
  const px = Math.max(drawn - gd.parentElement.clientWidth, gd.getBoundingClientRect().right - columnRight);
  const title = gd._fullLayout && gd._fullLayout.title ? gd._fullLayout.title.text || '' : '';
  record(gd, 'figure', px, {line_no: 1, line: clip('figure: ' + title), width: Math.round(drawn)});
}
// Display equations: the typeset formula against its box and the column (the TeX names it).
const texOf = new Map();
try {
  for (const item of MathJax.startup.document.math) texOf.set(item.typesetRoot, item.math);
} catch (e) { /* no MathJax on the page */ }
for (const mc of article.querySelectorAll('mjx-container[display="true"]')) {
  const box = mc.closest('div.math') || mc.parentElement;
  const formula = (mc.querySelector('mjx-math') || mc).getBoundingClientRect();
  const px = Math.max(formula.width - box.clientWidth, formula.right - columnRight,
                      mc.scrollWidth - mc.clientWidth, box.scrollWidth - box.clientWidth);
  record(mc, 'math', px, {line_no: 1, line: clip('math: ' + (texOf.get(mc) || box.textContent).trim())});
}
// An output wider than the column that none of the above explains (e.g. raw HTML).
for (const out of article.querySelectorAll('.cell_output')) {
  const px = excess(out);
  if (px > 1 && !found.some(f => f.kind !== 'code' && out.contains(f.node))) {
    found.push({kind: 'output', px: Math.round(px), section: section(out), allowed: !!out.closest(allowed),
                line_no: 1, line: clip(out.textContent.trim().split('\n')[0])});
  }
}
return {inner_width: window.innerWidth, column: Math.round(article.clientWidth), counts,
        found: found.map(({node, ...rest}) => rest)};
"""

WIDE_OUTPUT_TAG = "wide-output"          # cell tag: "this output scrolls sideways on purpose"


def _measure_overflow(drv, base: str, page: str, width: int) -> dict:
    drv.set_window_size(width, HEIGHT)
    try:
        _open(drv, base, page)
        if drv.execute_script("return document.querySelectorAll('.math').length > 0"):
            drv.execute_async_script(WAIT_FOR_MATHJAX.replace("arguments_timeout", str(int(WAIT_S * 1000))))
        _wait(lambda: drv.execute_script(
            "return Array.from(document.querySelectorAll('.plotly-graph-div')).every(g => g._fullLayout)"))
        return drv.execute_script(OVERFLOW_REPORT, f".tag_{WIDE_OUTPUT_TAG}")
    finally:
        drv.set_window_size(DEFAULT_WIDTH, HEIGHT)


def _describe(found: list[dict]) -> str:
    return "\n".join(f"  {f['kind']} in '{f['section']}', {f['px']} px too wide; line {f['line_no']}: {f['line']!r}"
                     for f in found)


@pytest.fixture(scope="session")
def overflow(site, driver):
    cache: dict[tuple[str, int], dict] = {}

    def get(page: str, width: int) -> dict:
        if (page, width) not in cache:
            if not (HTML / page).exists():
                pytest.fail(f"{page} is in _toc.yml but was not built into {HTML}")
            cache[page, width] = _measure_overflow(driver, site, page, width)
        return cache[page, width]

    return get


@pytest.mark.parametrize("width", LAPTOP_WIDTHS)
@pytest.mark.parametrize("page", PAGES)
def test_nothing_is_wider_than_the_column(overflow, page, width):
    # Catches notebook lines longer than the column, long printed lines, wide tables and fixed-width figures.
    report = overflow(page, width)
    assert report["inner_width"] == width, f"the window is {report['inner_width']} px wide, not {width}"
    offending = [f for f in report["found"] if not f["allowed"]]
    assert not offending, (f"{page} at a {width} px window: {len(offending)} blocks are wider than the "
                           f"{report['column']} px column\n" + _describe(offending[:15]))


# Plants code cells with one line each into the page, cloned from the page's own cells so that they sit in
# the same boxes: arguments[0] is a list of [selector of the cell to clone, line]. Also plants a wide table,
# a fixed-width plotly figure and a long output inside a cell tagged wide-output when arguments[1] is true.
PLANT = r"""
const [cells, extras, done] = [arguments[0], arguments[1], arguments[arguments.length - 1]];
document.querySelectorAll('details').forEach(d => { d.open = true; });
document.querySelectorAll('.toggle-hidden').forEach(el => el.classList.remove('toggle-hidden'));
const missing = [];
for (const [selector, line] of cells) {
  const original = document.querySelector(selector);
  if (!original) { missing.push(selector); continue; }
  const copy = original.cloneNode(true);
  copy.querySelector('.cell_input pre').textContent = line;
  original.after(copy);
}
if (!extras) { done(missing); return; }
const article = document.querySelector('article.bd-article');
const table = document.createElement('table');
table.innerHTML = '<tr>' + '<td>unbreakable_planted_cell_text</td>'.repeat(12) + '</tr>';
article.appendChild(table);
const wide = document.createElement('div');
wide.className = 'cell tag_wide-output';
wide.innerHTML = '<div class="cell_output"><pre>' + 'w'.repeat(300) + '</pre></div>';
article.appendChild(wide);
const holder = document.createElement('div');
article.appendChild(holder);
Plotly.newPlot(holder, [{x: [0, 1], y: [0, 1]}], {width: 1600, title: {text: 'planted figure'}})
  .then(() => done(missing), e => done(['plotly: ' + e]));
"""
PLANT_PAGE = "book/03_group_advantages.html"      # has plain, collapsed (hide-input) and solution code cells
CODE_CELLS = {"plain": "article .cell:not(.tag_hide-input):not(.tag_hide-cell)",
              "collapsed": "article .cell.tag_hide-input",
              "solution": "article .solution .cell"}


def _notebook_line_length() -> int:
    import tomllib

    return tomllib.loads((ROOT / "book" / "ruff.toml").read_text())["line-length"]


def _planted_report(driver, site, cells, extras: bool, width: int = 1280) -> dict:
    driver.set_window_size(width, HEIGHT)
    try:
        _open(driver, site, PLANT_PAGE)
        missing = driver.execute_async_script(PLANT, cells, extras)
        assert not missing, f"{PLANT_PAGE} lacks the cells to plant into: {missing}"
        return driver.execute_script(OVERFLOW_REPORT, f".tag_{WIDE_OUTPUT_TAG}")
    finally:
        driver.set_window_size(DEFAULT_WIDTH, HEIGHT)


@pytest.mark.parametrize("width", LAPTOP_WIDTHS)
def test_a_line_of_the_notebook_line_length_fits_every_kind_of_code_cell(site, driver, width):
    # Catches a ruff line length (book/ruff.toml) that the column cannot show, e.g. after a theme or CSS change.
    length = _notebook_line_length()
    cells = [[selector, kind[0] * length] for kind, selector in CODE_CELLS.items()]
    report = _planted_report(driver, site, cells, extras=False, width=width)
    planted = [f for f in report["found"] if f["line"] in {line for _, line in cells}]
    assert not planted, f"a {length}-character line does not fit at {width} px:\n" + _describe(planted)


def test_the_overflow_check_reports_planted_wide_code_tables_and_figures(site, driver):
    # Without it, the page test above could pass because the check sees nothing (a wrong selector, a
    # column measured on the wrong element); it must name the planted line and allow only the tagged output.
    long_line = "planted = " + "'x' + " * 20 + "'x'"
    report = _planted_report(driver, site, [[CODE_CELLS["plain"], "ok = 1\n" + long_line]], extras=True)
    def planted(marker):
        return [(f["kind"], f["line_no"], f["allowed"]) for f in report["found"] if marker in f["line"]]

    assert planted(long_line) == [("code", 2, False)], report["found"]
    assert planted("unbreakable_planted") == [("table", 1, False)], report["found"]
    assert planted("planted figure") == [("figure", 1, False)], report["found"]
    assert planted("w" * 100) == [("output", 1, True)], report["found"]


def test_book_has_explorers_and_math(reports):
    """Guard against a vacuous pass: the book as a whole must contain sliders, math and figures."""
    built = [p for p in PAGES if (HTML / p).exists()]
    all_reports = [reports(p) for p in built]
    assert sum(len(r["sliders"]) for r in all_reports) >= 1
    assert sum(r["math"]["math_nodes"] for r in all_reports) >= 10
    assert sum(r["images"]["total"] for r in all_reports) >= 1


def test_screenshots(site, driver, reports):
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    chosen = [p for p in SCREENSHOT_PAGES if (HTML / p).exists()]
    chosen += [p for p in PAGES if (HTML / p).exists() and p not in chosen]
    for page in chosen[:2]:
        reports(page)
        driver.get(site + page)
        _wait(lambda: driver.execute_script("return document.readyState") == "complete")
        if driver.execute_script("return document.querySelectorAll('.math').length > 0"):
            driver.execute_async_script(WAIT_FOR_MATHJAX.replace("arguments_timeout", str(int(WAIT_S * 1000))))
        height = min(int(driver.execute_script("return document.documentElement.scrollHeight")), 8000)
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                               {"width": 1280, "height": height, "deviceScaleFactor": 1, "mobile": False})
        try:
            time.sleep(0.5)                                       # let plotly's responsive figures re-layout
            target = SCREENSHOTS / (Path(page).stem + ".png")
            driver.save_screenshot(str(target))
        finally:
            driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
        assert target.stat().st_size > 20_000, f"{target} looks blank"


# ---- no sideways scroll on a phone ---------------------------------------------------------------------------

PHONE = {"width": 390, "height": 844, "deviceScaleFactor": 3, "mobile": True}

# The document's width against the screen's, and the outermost elements that stick out past its right edge.
PAGE_WIDTH_REPORT = r"""
document.querySelectorAll('details').forEach(d => { d.open = true; });
document.querySelectorAll('.toggle-hidden').forEach(el => el.classList.remove('toggle-hidden'));
const screen = document.documentElement.clientWidth;
const out = [];
for (const el of document.body.querySelectorAll('*')) {
  const r = el.getBoundingClientRect();
  if (r.width === 0 || r.right <= screen + 1) continue;
  const parent = el.parentElement;
  if (parent && parent !== document.body && parent.getBoundingClientRect().right > screen + 1) continue;
  let clipped = false;                 // inside a box that scrolls or clips: the page does not move
  for (let a = parent; a && a !== document.body; a = a.parentElement) {
    const ox = getComputedStyle(a).overflowX;
    if (ox !== 'visible' && a.getBoundingClientRect().right <= screen + 1) { clipped = true; break; }
  }
  if (clipped) continue;
  const sec = el.closest('section');
  const h = sec && sec.querySelector('h1, h2, h3, h4');
  out.push({tag: el.tagName.toLowerCase(), cls: String(el.className).slice(0, 60), px: Math.round(r.right - screen),
            section: h ? h.textContent.replace(/[#¶]/g, '').trim().slice(0, 60) : '',
            text: (el.textContent || '').trim().slice(0, 80)});
}
out.sort((a, b) => b.px - a.px);
return {screen, document: document.documentElement.scrollWidth, body: document.body.scrollWidth,
        sticking_out: out.slice(0, 8)};
"""


# Every number in a table, found in the table's text nodes, and those whose characters are drawn on more
# than one line (a range's client rectangles with more than one distinct top). A number is a maximal run
# such as -0.075, 4,808, 5e-05 or 60% that touches no letter or digit on either side (hashes are not numbers).
NUMBER_SPLIT_REPORT = r"""
document.querySelectorAll('details').forEach(d => { d.open = true; });
document.querySelectorAll('.toggle-hidden').forEach(el => el.classList.remove('toggle-hidden'));
const number = /(?<![\p{L}\p{N}_.\-\u2212+])[\u2212+-]?\d+(?:[.,]\d+)*(?:e[\u2212+-]?\d+)?%?(?![\p{L}\p{N}_])/gu;
let total = 0;
const split = [];
for (const table of document.querySelectorAll('article.bd-article table')) {
  const walker = document.createTreeWalker(table, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    for (const m of node.data.matchAll(number)) {
      const range = document.createRange();
      range.setStart(node, m.index);
      range.setEnd(node, m.index + m[0].length);
      const tops = new Set(Array.from(range.getClientRects()).filter(r => r.width > 0 && r.height > 0)
                                .map(r => Math.round(r.top)));
      if (tops.size === 0) continue;              // not drawn (a hidden cell)
      total += 1;
      if (tops.size > 1) {
        const cell = node.parentElement.closest('td, th');
        split.push({number: m[0], lines: tops.size,
                    cell: (cell ? cell.textContent : node.data).trim().slice(0, 60)});
      }
    }
  }
}
return {total, split};
"""


def _on_phone(drv, base: str, page: str, plant=None) -> dict:
    """The page at a 390 px phone: its width report, with the table numbers' report under 'numbers'."""
    drv.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", PHONE)
    try:
        _open(drv, base, page)
        if drv.execute_script("return document.querySelectorAll('.math').length > 0"):
            drv.execute_async_script(WAIT_FOR_MATHJAX.replace("arguments_timeout", str(int(WAIT_S * 1000))))
        _wait(lambda: drv.execute_script(
            "return Array.from(document.querySelectorAll('.plotly-graph-div')).every(g => g._fullLayout)"))
        if plant:
            drv.execute_script(plant)
        report = drv.execute_script(PAGE_WIDTH_REPORT)
        report["numbers"] = drv.execute_script(NUMBER_SPLIT_REPORT)
        return report
    finally:
        drv.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


@pytest.fixture(scope="session")
def phone(site, driver):
    return _page_cache(_on_phone, driver, site)


def _sideways(report: dict) -> int:
    return max(report["document"], report["body"]) - report["screen"]


@pytest.mark.parametrize("page", PAGES)
def test_no_page_scrolls_sideways_on_a_phone(phone, page):
    # Catches unbreakable inline code, tables and equations wider than a 390 px screen that move the whole page.
    report = phone(page)
    assert report["screen"] == PHONE["width"], f"the emulated screen is {report['screen']} px, not {PHONE['width']}"
    assert _sideways(report) <= 1, (
        f"{page} scrolls {_sideways(report)} px sideways on a {PHONE['width']} px phone; sticking out:\n"
        + "\n".join(f"  <{e['tag']} class='{e['cls']}'> in '{e['section']}', {e['px']} px: {e['text']!r}"
                    for e in report["sticking_out"]))


@pytest.mark.parametrize("page", PAGES)
def test_table_numbers_stay_on_one_line_on_a_phone(phone, page):
    # Catches CSS that lets a table cell break anywhere (overflow-wrap: anywhere on td), so that "-0.075"
    # reads "-0." / "07" / "5" on a phone; a table that needs more room must scroll inside its own box.
    numbers = phone(page)["numbers"]
    assert not numbers["split"], (
        f"{page}: {len(numbers['split'])} of {numbers['total']} table numbers are split across lines on a "
        f"{PHONE['width']} px phone:\n" + "\n".join(f"  {s['number']!r} on {s['lines']} lines in {s['cell']!r}"
                                                      for s in numbers["split"][:10]))


PLANT_SPLIT_NUMBER = r"""
const table = document.createElement('table');
table.innerHTML = '<tr><td><span style="display: inline-block; width: 2ch; overflow-wrap: anywhere">' +
                  '[\u22120.124, \u22120.026]</span></td><td>4,808</td></tr>';
document.querySelector('article.bd-article').appendChild(table);
"""


def test_the_number_check_reports_a_planted_split_number(site, driver):
    # Without it, the number test could pass because it found no numbers (a wrong regex or selector) or
    # compared the wrong boxes: a cell two characters wide must split both ends of the interval, not 4,808.
    clean = _on_phone(driver, site, PLANT_PAGE)["numbers"]
    planted = _on_phone(driver, site, PLANT_PAGE, plant=PLANT_SPLIT_NUMBER)["numbers"]
    assert planted["total"] == clean["total"] + 3, (clean["total"], planted["total"])
    new = [s["number"] for s in planted["split"] if s not in clean["split"]]
    assert new == ["\u22120.124", "\u22120.026"], planted["split"]


PLANT_WIDE_BLOCK = r"""
const block = document.createElement('div');
block.style.width = '1000px';
block.textContent = 'planted wide block';
document.querySelector('article.bd-article').appendChild(block);
"""


def test_the_phone_check_reports_a_planted_wide_block(site, driver):
    # Without it, the phone test could pass because it measured the wrong element or the emulation failed.
    clean = _on_phone(driver, site, PLANT_PAGE)
    planted = _on_phone(driver, site, PLANT_PAGE, plant=PLANT_WIDE_BLOCK)
    assert _sideways(clean) <= 1, clean
    assert _sideways(planted) > 500, planted
    assert any("planted wide block" in e["text"] for e in planted["sticking_out"]), planted["sticking_out"]


# The explorers on a phone: each figure's modebar against its title, axis titles and legend, and each slider's rail.
EXPLORER_PHONE_REPORT = r"""
const box = el => el.getBoundingClientRect();
const area = (a, b) => Math.max(0, Math.min(a.right, b.right) - Math.max(a.left, b.left))
                     * Math.max(0, Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top));
const labelled = [['title', '.gtitle'], ['axis title', '.xtitle, .ytitle'], ['legend', '.legend'],
                  ['annotation', '.annotation']];
return Array.from(document.querySelectorAll('.js-plotly-plot')).filter(gd => gd._fullLayout).map(gd => {
  const modebar = gd.querySelector('.modebar');
  const covered = [];
  if (modebar && box(modebar).width > 0) {
    for (const [kind, selector] of labelled) {
      for (const el of gd.querySelectorAll(selector)) {
        const px = area(box(modebar), box(el));
        if (px > 0) covered.push({kind, text: el.textContent.trim().slice(0, 60), px: Math.round(px)});
      }
    }
  }
  const title = gd._fullLayout.title && gd._fullLayout.title.text || '';
  return {title: title.slice(0, 60), width: Math.round(box(gd).width), covered,
          rails: Array.from(gd.querySelectorAll('.slider-rail-rect')).map(r => Math.round(box(r).width))};
});
"""
PHONE_EXPLORER_PAGES = ("book/05_soft_surrogate.html", "book/07_sign_asymmetry.html")
PHONE_SLIDER_PX = 250


def _explorers_on_phone(drv, base: str, page: str, plant=None) -> list[dict]:
    drv.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", PHONE)
    try:
        _open(drv, base, page)
        _wait(lambda: drv.execute_script(
            "return Array.from(document.querySelectorAll('.plotly-graph-div')).every(g => g._fullLayout)"))
        if plant:
            assert drv.execute_async_script(plant) == "ok"
        return drv.execute_script(EXPLORER_PHONE_REPORT)
    finally:
        drv.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


@pytest.mark.parametrize("page", PHONE_EXPLORER_PAGES)
def test_explorers_fit_a_phone(site, driver, page):
    # Catches the modebar drawn over a figure's title (plotly's default title height on a narrow figure) and
    # sliders squeezed by a legend beside the plot or by a second slider on the same row.
    figures = _explorers_on_phone(driver, site, page)
    sliders = [f for f in figures if f["rails"]]
    assert any(len(f["rails"]) >= 2 for f in sliders), f"{page}: no explorer with a slider per parameter: {figures}"
    for f in figures:
        assert not f["covered"], f"{page}, figure {f['title']!r}: the modebar covers {f['covered']}"
        assert min(f["rails"], default=PHONE_SLIDER_PX) >= PHONE_SLIDER_PX, (
            f"{page}, figure {f['title']!r} ({f['width']} px wide): slider rails of {f['rails']} px on a "
            f"{PHONE['width']} px phone; each needs {PHONE_SLIDER_PX}")


# A figure laid out as the explorers once were: a 60 px top margin (plotly centres the title in it, in the
# modebar's row), a legend beside the plot and two sliders sharing one row.
PLANT_CRAMPED_FIGURE = r"""
const done = arguments[arguments.length - 1];
const holder = document.createElement('div');
document.querySelector('article.bd-article').appendChild(holder);
const step = v => ({method: 'restyle', args: [{visible: [v, !v]}], label: String(v)});
Plotly.newPlot(holder, [{y: [0, 1], name: 'a first trace'}, {y: [1, 0], name: 'a second trace'}],
  {title: {text: 'planted title that runs under the modebar'}, margin: {t: 60},
   sliders: [{steps: [step(true), step(false)], len: 0.5}, {steps: [step(true), step(false)], len: 0.5, x: 0.5}]},
  {responsive: true}).then(() => done('ok'), e => done('plotly: ' + e));
"""


def test_the_phone_explorer_check_reports_a_planted_cramped_figure(site, driver):
    # Without it, the explorer test could pass because it found no modebar or measured the wrong rails.
    figures = _explorers_on_phone(driver, site, PLANT_PAGE, plant=PLANT_CRAMPED_FIGURE)
    planted = [f for f in figures if f["title"].startswith("planted")]
    assert len(planted) == 1, figures
    assert "title" in {c["kind"] for c in planted[0]["covered"]}, planted
    assert len(planted[0]["rails"]) == 2 and max(planted[0]["rails"]) < PHONE_SLIDER_PX, planted


# A display equation far wider than any column, typeset by the page's own MathJax.
PLANT_EQUATION = r"""
const done = arguments[arguments.length - 1];
const box = document.createElement('div');
box.className = 'math notranslate nohighlight';
box.textContent = '\\[\\mathrm{planted}=' + Array.from({length: 40}, (_, i) => 'x_{' + i + '}').join('+') + '\\]';
document.querySelector('article.bd-article section').appendChild(box);
MathJax.typesetPromise([box]).then(() => done('ok'), e => done('MathJax: ' + e));
"""


def test_the_overflow_check_reports_a_planted_wide_equation(site, driver):
    # The display-math half of the column check: a long equation must be named, never allowed.
    driver.set_window_size(1280, HEIGHT)
    try:
        _open(driver, site, PLANT_PAGE)
        driver.execute_async_script(WAIT_FOR_MATHJAX.replace("arguments_timeout", str(int(WAIT_S * 1000))))
        assert driver.execute_async_script(PLANT_EQUATION) == "ok"
        report = driver.execute_script(OVERFLOW_REPORT, f".tag_{WIDE_OUTPUT_TAG}")
    finally:
        driver.set_window_size(DEFAULT_WIDTH, HEIGHT)
    planted = [f for f in report["found"] if "planted" in f["line"]]
    assert [(f["kind"], f["allowed"]) for f in planted] == [("math", False)], report["found"]
    assert planted[0]["px"] > 200, planted
    assert report["counts"]["math"] >= 2, report["counts"]   # the page's own equations were measured too


# ---- the course apparatus: numbered exercises, collapsed solutions, citations, pseudocode ----------------------

EXERCISE_REPORT = r"""
const numbers = Array.from(document.querySelectorAll('.exercise .caption-number'))
                     .map(el => el.textContent.trim());
const sol = document.querySelector('.solution.dropdown');
const content = sol && sol.querySelector('.admonition-title ~ *');
return {numbers: numbers,
        solution: sol ? {hidden: sol.classList.contains('toggle-hidden'),
                         visibility: getComputedStyle(content).visibility,
                         text: sol.textContent} : null};
"""


def _open(driver, site, page):
    driver.get(site + page)
    _wait(lambda: driver.execute_script("return document.readyState") == "complete")


def test_exercises_are_numbered_and_solutions_start_collapsed(site, driver):
    _open(driver, site, "book/16_conclusion.html")
    before = _wait(lambda: (lambda r: r if r["solution"] and r["solution"]["hidden"] else None)(
        driver.execute_script(EXERCISE_REPORT)), timeout=10) or driver.execute_script(EXERCISE_REPORT)
    numbers = [int(re.fullmatch(r"Exercise (\d+)", n).group(1)) for n in before["numbers"]]
    assert len(numbers) >= 10 and numbers == sorted(set(numbers)), f"exercise numbers: {before['numbers']}"
    sol = before["solution"]
    assert sol and sol["hidden"] and sol["visibility"] == "hidden", f"first solution is not collapsed: {sol}"
    button = driver.find_element("css selector", ".solution.dropdown .toggle-button")
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", button)
    button.click()
    after = _wait(lambda: (lambda r: r if not r["solution"]["hidden"] else None)(
        driver.execute_script(EXERCISE_REPORT)), timeout=5) or driver.execute_script(EXERCISE_REPORT)
    assert after["solution"]["visibility"] == "visible", "clicking the toggle did not reveal the solution"
    assert "assert " in after["solution"]["text"], "the solution should contain its check cell"


def test_citations_link_to_the_bibliography(site, driver):
    _open(driver, site, "book/05_soft_surrogate.html")
    links = driver.execute_script(
        "return Array.from(document.querySelectorAll('.bibtex-citation a')).map(a => a.getAttribute('href'));")
    assert links, "no citation links on the chapter page"
    target = links[0]
    assert target.startswith("bibliography.html#"), target
    _open(driver, site, "book/" + target.split("#")[0])
    entry = driver.execute_script("const el = document.getElementById(arguments[0]); "
                                  "return el ? (el.closest('dd, li, div') || el).textContent : null;", target.split("#")[1])
    assert entry and "arXiv" in entry, f"citation target {target} does not resolve to a bibliography entry: {entry!r}"


def test_algorithms_render_as_numbered_pseudocode_linked_to_code(site, driver):
    _open(driver, site, "book/algorithms.html")
    blocks = driver.execute_script(r"""
      return Array.from(document.querySelectorAll('.proof.algorithm')).map(a => ({
        title: a.querySelector('.admonition-title').textContent.trim(),
        steps: a.querySelectorAll('ol > li').length}));""")
    assert [int(re.match(r"Algorithm (\d+)", b["title"]).group(1)) for b in blocks] == [1, 2, 3, 4], blocks
    assert all(b["steps"] >= 5 for b in blocks), blocks
    code = driver.execute_script("return Array.from(document.querySelectorAll('pre')).map(p => p.textContent).join('\\n');")
    for function in ("def group_advantages", "def policy_loss", "def gradient_audit", "def cmd_compare"):
        assert function in code, f"{function} is not included under its algorithm"

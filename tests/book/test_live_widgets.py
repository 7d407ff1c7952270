"""Open chapter 5 in a running JupyterLab, run it, and move a temperature slider of its live explorer.

This is the route a reader takes to the live widgets (``make lab``): a Jupyter server from the book's
environment (127.0.0.1, a random port, a token), JupyterLab in Debian's Chromium (driven by selenium, as
tests/book/test_browser.py does), ipywidgets drawn by its JupyterLab extension. The chapter is a copy in a
temporary folder, so the repository's notebook is never written. The test runs the chapter from the
browser down to its gate-weight explorer (the book build already executes every cell; what only this
route can break is the front end and the widgets), drags the explorer's tau_pos slider, and checks that
the figure was redrawn with another gate-weight panel. The server (and with it the kernel) is stopped however the test
ends. Chromium and the skip/require policy (SAPO_LAB_REQUIRE_BROWSER=1) are those of test_browser.py.
"""

from __future__ import annotations

import base64
import io
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest
from test_browser import CHROMEDRIVER, CHROMIUM, CHROMIUM_FLAGS, browser_tools  # noqa: F401

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
CHAPTER = ROOT / "book" / "05_soft_surrogate.ipynb"
JUPYTER = Path(sys.executable).parent / "jupyter"
EXPLORER_CELL = "live_explorer(\n    plot_temperatures"      # the cell that creates the gate-weight explorer
START_S, RUN_S = 90.0, 240.0
# JupyterLab settings for this run only: every cell stays in the page (no windowed notebook), and no
# request for news or updates leaves the machine.
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                         "checkForUpdates": False},
}

NOTEBOOK_STATE = r"""
const app = window.jupyterapp;
const panel = app && app.shell.currentWidget;
if (!panel || !panel.sessionContext || !panel.context || !panel.context.isReady) return {ready: false};
const session = panel.sessionContext.session;
const explorer = panel.content.widgets.findIndex(c => c.model.sharedModel.getSource().includes(arguments[0]));
const cells = panel.content.widgets.slice(0, explorer + 1).filter(c => c.model.type === 'code');
const errors = [];
for (const cell of cells) {
  for (const out of cell.model.outputs.toJSON()) {
    if (out.output_type === 'error') errors.push(out.ename + ': ' + out.evalue);
  }
}
return {ready: true, explorer, kernel: session && session.kernel ? session.kernel.status : null,
        executed: cells.filter(c => c.model.executionCount !== null).length, cells: cells.length, errors};
"""

# The live explorer's tau_pos slider (ipywidgets 8 draws it with noUiSlider) and the figure it draws.
EXPLORER_STATE = r"""
const box = Array.from(document.querySelectorAll('.widget-interact'))
  .find(b => Array.from(b.querySelectorAll('.widget-slider .widget-label')).some(l => l.textContent === 'tau_pos'));
if (!box) return null;
const slider = Array.from(box.querySelectorAll('.widget-slider'))
  .find(s => s.querySelector('.widget-label').textContent === 'tau_pos');
const img = box.querySelector('.widget-output img');
return {readout: slider.querySelector('.widget-readout').textContent.trim(),
        handle: !!slider.querySelector('.noUi-handle'), image: img ? img.src : null};
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _status(url: str, token: str) -> int | None:
    request = urllib.request.Request(url + "/api/status", headers={"Authorization": f"token {token}"})
    try:
        with urllib.request.urlopen(request, timeout=2) as response:
            return response.status
    except OSError:
        return None


def _wait(predicate, timeout: float, interval: float = 0.2):
    end = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > end:
            return value
        time.sleep(interval)


@pytest.fixture
def lab(tmp_path, browser_tools):  # noqa: F811  (the imported fixture, requested by name)
    """A JupyterLab server on 127.0.0.1 serving a copy of chapter 5; stopped at the end, whatever happens."""
    if not JUPYTER.exists():
        pytest.fail(f"{JUPYTER} is missing: JupyterLab is part of requirements.txt (make venv)")
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    shutil.copy2(CHAPTER, notebooks / CHAPTER.name)
    for name, values in LAB_SETTINGS.items():
        target = tmp_path / "settings" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(values))
    token, port = secrets.token_hex(16), _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if k != "SAPO_LAB_BOOK"}   # live widgets, not the book's notes
    env.update(OMP_NUM_THREADS="1", MPLBACKEND="module://matplotlib_inline.backend_inline",
               JUPYTER_CONFIG_DIR=str(tmp_path / "config"), JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
               JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "workspaces"))
    log = (tmp_path / "server.log").open("w")
    server = subprocess.Popen(
        [str(JUPYTER), "lab", "--no-browser", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
         "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
         f"--ServerApp.root_dir={notebooks}", "--LabApp.expose_app_in_browser=True",
         "--ServerApp.terminals_enabled=False", "--ServerApp.allow_root=True",
         "--LabApp.extension_manager=readonly"],
        stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        if not _wait(lambda: server.poll() is not None or _status(url, token) == 200, START_S) \
                or server.poll() is not None:
            pytest.fail(f"JupyterLab did not answer on {url} (exit {server.poll()}):\n"
                        + (tmp_path / "server.log").read_text()[-3000:])
        yield dict(url=url, token=token, notebooks=notebooks, log=tmp_path / "server.log")
    finally:
        _stop(server)
        log.close()


def _stop(server: subprocess.Popen) -> None:
    """SIGTERM lets the server shut its kernels down; what is still running 15 s later is killed."""
    if server.poll() is None:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=5)


@pytest.fixture
def driver(browser_tools):  # noqa: F811
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="sapo-chromium-lab-")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    drv = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    drv.set_page_load_timeout(START_S)
    try:
        yield drv
    finally:
        drv.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _right_half(data_url: str):
    """The pixels of the figure's right panel (plot_temperatures draws the gate weight on the right)."""
    import numpy as np
    from PIL import Image

    assert data_url.startswith("data:image/png;base64,"), data_url[:40]
    image = np.asarray(Image.open(io.BytesIO(base64.b64decode(data_url.split(",", 1)[1]))).convert("L"))
    return image[:, image.shape[1] // 2:]


def _drag(drv, handle, dx: int) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    drv.execute_script("arguments[0].scrollIntoView({block: 'center'});", handle)
    ActionChains(drv).click_and_hold(handle).move_by_offset(dx // 2, 0).move_by_offset(dx - dx // 2, 0) \
        .release().perform()


def test_a_temperature_slider_redraws_the_gate_weight_in_jupyterlab(lab, driver):
    """Catches the live route failing anywhere a reader would meet it: no Jupyter front end in the book's
    environment, widgets printed as text (no lab extension for ipywidgets), a chapter cell that raises in a
    live kernel, an explorer whose slider does not reach its callback, and a callback that redraws the
    same gate-weight panel whatever the temperature."""
    driver.get(f"{lab['url']}/lab/tree/{CHAPTER.name}?token={lab['token']}")
    state = _wait(lambda: (lambda s: s if s["ready"] and s["kernel"] == "idle" else None)(
        driver.execute_script(NOTEBOOK_STATE, EXPLORER_CELL)), START_S)
    assert state, f"the notebook did not open with an idle kernel: {driver.execute_script(NOTEBOOK_STATE, '')}"
    assert state["explorer"] >= 0, f"{CHAPTER.name} has no cell with {EXPLORER_CELL!r}"
    # every cell above the one after the explorer, the explorer's included
    driver.execute_script("const panel = window.jupyterapp.shell.currentWidget;"
                          "panel.content.activeCellIndex = arguments[0] + 1;"
                          "window.jupyterapp.commands.execute('notebook:run-all-above');", state["explorer"])

    def finished():
        s = driver.execute_script(NOTEBOOK_STATE, EXPLORER_CELL)
        return s if s["errors"] or (s["executed"] == s["cells"] and s["kernel"] == "idle") else None

    state = _wait(finished, RUN_S, interval=0.5) or driver.execute_script(NOTEBOOK_STATE, EXPLORER_CELL)
    assert not state["errors"], f"a cell of {CHAPTER.name} raised in JupyterLab: {state['errors']}"
    assert state["executed"] == state["cells"], f"{state['executed']} of {state['cells']} cells ran in {RUN_S} s"

    before = _wait(lambda: (lambda s: s if s and s["image"] else None)(driver.execute_script(EXPLORER_STATE)), 30)
    assert before, f"the live explorer did not draw: {driver.execute_script(EXPLORER_STATE)}"
    assert before["handle"], "the tau_pos slider is not drawn as a slider (is jupyterlab_widgets installed?)"
    handle = driver.execute_script(
        "return Array.from(document.querySelectorAll('.widget-interact .widget-slider'))"
        ".find(s => s.querySelector('.widget-label').textContent === 'tau_pos').querySelector('.noUi-handle');")
    _drag(driver, handle, 60)

    def redrawn():
        s = driver.execute_script(EXPLORER_STATE)
        kernel = driver.execute_script(NOTEBOOK_STATE, EXPLORER_CELL)["kernel"]
        return s if s["image"] != before["image"] and s["readout"] != before["readout"] and kernel == "idle" \
            else None

    after = _wait(redrawn, 30) or driver.execute_script(EXPLORER_STATE)
    assert after["readout"] != before["readout"], f"the slider did not move: tau_pos = {after['readout']}"
    assert after["image"] != before["image"], "moving tau_pos did not redraw the explorer"
    old, new = _right_half(before["image"]), _right_half(after["image"])
    assert old.shape == new.shape and (old != new).mean() > 0.002, (
        f"tau_pos {before['readout']} -> {after['readout']} left the gate-weight panel as it was")

"""The quickstart notebook in a real browser: JupyterLab on 127.0.0.1 driven by headless Chromium.

Checks from the DOM that the live run widgets changed value while the run was going and that the
profile pictures rendered. Screenshots go to ``$PYIPU_TEST_ARTIFACTS/notebooks-browser/``
(default ``test-artifacts/notebooks-browser/`` at the repository root). Locally the test skips
without chromium or the Playwright package; under ``CI=true`` it fails instead.
"""

from __future__ import annotations

import json
import os
import pathlib
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

pytestmark = pytest.mark.slow  # left out of the quick subset, pytest -m "not slow"

REPO = pathlib.Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Long enough for the browser to see several updates (the stored notebook runs 400 requests).
RUN_SECONDS = 6

SAMPLE_JS = """() => {
    const r = document.querySelector('.ipu-run');
    if (!r) return null;
    const bar = r.querySelector('.ipu-requests .progress-bar');
    const svg = r.querySelector('svg.ipu-throughput');
    const lat = r.querySelector('.ipu-latency');
    const status = r.querySelector('.ipu-status');
    return {bar: bar ? bar.style.width : null, n: svg ? svg.getAttribute('data-n') : null,
            latency: lat ? lat.innerText : null, status: status ? status.innerText : null};
}"""

# Loaded pictures per figure class of the profile (memory heat map, cycles, timeline).
PICTURES_JS = """() => Object.fromEntries(
    [...document.querySelectorAll('.ipu-profile figure')].map(f => {
        const img = f.querySelector('img');
        return [f.className, !!img && img.complete && img.naturalWidth > 0];
    }))"""

# Every code cell of the open notebook: execution count and the errors it raised.
CELLS_JS = """() => {
    const nb = window.jupyterapp.shell.currentWidget.content;
    return nb.widgets.filter(c => c.model.type === 'code').map(c => {
        const outs = [];
        for (let i = 0; i < c.model.outputs.length; i++) outs.push(c.model.outputs.get(i).toJSON());
        return {count: c.model.executionCount,
                errors: outs.filter(o => o.output_type === 'error')
                            .map(o => o.ename + ': ' + o.evalue)};
    });
}"""

KERNEL_IDLE_JS = """() => {
    const p = window.jupyterapp && window.jupyterapp.shell.currentWidget;
    const k = p && p.sessionContext && p.sessionContext.session && p.sessionContext.session.kernel;
    return k && k.status === 'idle';
}"""


def _require_browser():
    """Playwright's sync API, or skip (fail under CI=true) when the browser tools are missing."""
    missing = []
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
        missing.append("the playwright package (test extras)")
    if not os.path.exists(CHROMIUM):
        missing.append("chromium (apt-get install chromium)")
    if shutil.which("jupyter-lab", path=os.path.dirname(sys.executable)) is None:
        missing.append("jupyterlab (test extras)")
    if missing:
        reason = "browser test needs " + ", ".join(missing)
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return sync_playwright


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _artifacts() -> pathlib.Path:
    base = pathlib.Path(os.environ.get("PYIPU_TEST_ARTIFACTS", REPO / "test-artifacts"))
    out = base / "notebooks-browser"
    out.mkdir(parents=True, exist_ok=True)
    return out


def _prepare(root: pathlib.Path) -> None:
    """A copy of quickstart.ipynb whose run lasts RUN_SECONDS, and a private Jupyter config."""
    nb = json.loads((REPO / "notebooks" / "quickstart.ipynb").read_text())
    runs = [
        c for c in nb["cells"] if c["cell_type"] == "code" and "%ipu run" in "".join(c["source"])
    ]
    assert len(runs) == 1
    src = "".join(runs[0]["source"])
    assert "--requests 400" in src
    src = src.replace("--requests 400", f"--seconds {RUN_SECONDS}")
    runs[0]["source"] = src.replace("== res.submitted == 400", "== res.submitted")
    (root / "nb").mkdir()
    (root / "nb" / "quickstart.ipynb").write_text(json.dumps(nb))
    news = root / "settings" / "@jupyterlab" / "apputils-extension"
    news.mkdir(parents=True)
    (news / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')


def _wait_up(url: str, server: subprocess.Popen, log: pathlib.Path) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"jupyter lab exited {server.returncode}:\n{log.read_text()[-3000:]}")
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"jupyter lab did not answer in 120 s:\n{log.read_text()[-3000:]}")


def test_quickstart_in_jupyterlab(tmp_path: pathlib.Path) -> None:
    sync_playwright = _require_browser()
    _prepare(tmp_path)
    shots = _artifacts()
    port, token = _free_port(), secrets.token_hex(16)
    env = dict(
        os.environ,
        JUPYTER_RUNTIME_DIR=str(tmp_path / "rt"),
        JUPYTER_CONFIG_DIR=str(tmp_path / "cfg"),
        JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "ws"),
    )
    env.pop("PYTHONSAFEPATH", None)
    log = tmp_path / "lab.log"
    cmd = [
        os.path.join(os.path.dirname(sys.executable), "jupyter-lab"),
        "--no-browser",
        "--allow-root",
        "--ip=127.0.0.1",
        f"--port={port}",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={tmp_path / 'nb'}",
        "--LabApp.expose_app_in_browser=True",
    ]
    with open(log, "w") as out:
        server = subprocess.Popen(
            cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    base = f"http://127.0.0.1:{port}"
    samples: list[dict] = []
    try:
        _wait_up(f"{base}/api/status?token={token}", server, log)
        with sync_playwright() as p:
            ctx = p.chromium.launch_persistent_context(
                str(tmp_path / "chrome-profile"),
                executable_path=CHROMIUM,
                headless=True,
                args=FLAGS,
                viewport={"width": 1200, "height": 1000},
            )
            try:
                page = ctx.new_page()
                page.goto(f"{base}/lab/tree/quickstart.ipynb?token={token}")
                page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)
                page.wait_for_function(KERNEL_IDLE_JS, timeout=90_000)
                page.evaluate(
                    "() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }"
                )
                # the dashboard, or a cell that raised before it (Run All stops there)
                page.wait_for_function(
                    f"() => !!document.querySelector('.ipu-run') || "
                    f"({CELLS_JS})().some(c => c.errors.length > 0)",
                    timeout=120_000,
                )
                if not page.query_selector(".ipu-run"):
                    page.screenshot(path=str(shots / "quickstart-failed.png"), full_page=True)
                    pytest.fail(f"a cell raised before the run: {page.evaluate(CELLS_JS)}")
                mid_shot = False
                deadline = time.monotonic() + RUN_SECONDS + 120
                while time.monotonic() < deadline:
                    s = page.evaluate(SAMPLE_JS)
                    samples.append(s)
                    if not mid_shot and s and s["status"] == "running" and int(s["n"] or 0) >= 3:
                        page.evaluate("() => document.querySelector('.ipu-run').scrollIntoView()")
                        page.screenshot(path=str(shots / "quickstart-midrun.png"))
                        mid_shot = True
                    if page.evaluate(PICTURES_JS):
                        break
                    time.sleep(0.25)
                page.wait_for_function(KERNEL_IDLE_JS, timeout=120_000)
                page.wait_for_function(
                    f"() => {{ const p = ({PICTURES_JS})(); "
                    "return Object.keys(p).length === 4 && Object.values(p).every(x => x); }",
                    timeout=30_000,
                )
                pictures = page.evaluate(PICTURES_JS)
                cells = page.evaluate(CELLS_JS)
                page.screenshot(path=str(shots / "quickstart-final.png"), full_page=True)
                page.evaluate("() => document.querySelector('.ipu-profile').scrollIntoView()")
                page.screenshot(path=str(shots / "quickstart-profile.png"))
            finally:
                ctx.close()
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # the server and its kernel (own session)
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
    assert all(c["count"] for c in cells), f"a code cell did not run: {cells}"
    assert not [e for c in cells for e in c["errors"]], f"a cell raised: {cells}"
    assert sorted(pictures) == [
        "ipu-figure-categories",
        "ipu-figure-cycles",
        "ipu-figure-memory",
        "ipu-figure-timeline",
    ]
    # What the page showed while the run was going (status "running"), sampled every 0.25 s.
    live = [s for s in samples if s and s["status"] == "running"]
    bars = {s["bar"] for s in live}
    points = {s["n"] for s in live}
    latencies = {s["latency"] for s in live}
    assert len(bars) >= 3, f"request bar did not move during the run: {sorted(map(str, bars))}"
    assert len(points) >= 3, f"throughput chart did not grow: {sorted(map(str, points))}"
    assert len(latencies) >= 2, f"latency label did not change: {latencies}"
    assert samples[-1] is not None and samples[-1]["status"].startswith("done")

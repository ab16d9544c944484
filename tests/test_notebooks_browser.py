"""The notebooks in a real browser: JupyterLab on 127.0.0.1 driven by headless Chromium.

One JupyterLab server (and one browser) serves the whole module:
- every notebook in notebooks/ runs through Run All; from the DOM, every code cell ran and
  nothing raised or wrote to stderr, every profile picture loaded, and element screenshots of
  the pictures pass the pixel checks of tests/notebook_pictures.py (a small model's heat map
  looks nearly empty; every timeline lane shows bars). The quickstart's live run widgets must
  change value while its run goes;
- Run All, then an interrupt while `%ipu run --seconds 30` is busy: that cell shows the
  KeyboardInterrupt, the cell after it never runs, the kernel stays usable;
- the JupyterLab Dark theme: every text of the `%ipu` outputs keeps a 4.5:1 contrast against
  its background (WCAG), and the PNG figures paint their own opaque background.

Screenshots go to ``$PYIPU_TEST_ARTIFACTS/notebooks-browser/`` (default
``test-artifacts/notebooks-browser/`` at the repository root). Locally the tests skip without
chromium or the Playwright package; under ``CI=true`` they fail instead.
"""

from __future__ import annotations

import importlib.util
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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import browser_js as JS
import notebook_pictures as P
import pytest

pytestmark = pytest.mark.slow  # left out of the quick subset, pytest -m "not slow"

REPO = pathlib.Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
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
VIEWPORT = {"width": 1600, "height": 1000}  # wide enough to show the pictures unscaled
# Long enough for the browser to see several updates (the stored notebook runs 400 requests).
RUN_SECONDS = 6
# Profile figures each notebook shows (the others show none).
INTERRUPT_BUTTON = '.jp-NotebookPanel-toolbar [data-command="notebook:interrupt-kernel"]'
FIGURES = {
    "quickstart": {"memory", "categories", "liveness", "cycles", "timeline"},
    "overlap_io": {"memory", "categories", "liveness", "cycles", "timeline"},
    "ipu_model_report": {"memory", "categories", "liveness", "cycles"},
}


@dataclass
class Lab:
    """The module's JupyterLab server and browser."""

    base: str
    token: str
    root: pathlib.Path
    context: Any
    shots: pathlib.Path

    def open(self, path: str) -> Any:
        """A new page with the notebook `path` (relative to the server root), kernel idle."""
        page = self.context.new_page()
        page.set_viewport_size(VIEWPORT)
        page.goto(f"{self.base}/lab/tree/{path}?token={self.token}&reset")
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)
        page.wait_for_function(JS.KERNEL_IDLE, timeout=90_000)
        return page

    def screenshot(self, page: Any, name: str) -> None:
        """The whole notebook: the viewport grows to the notebook's height for the shot."""
        height = page.evaluate(JS.NOTEBOOK_HEIGHT)
        page.set_viewport_size({"width": VIEWPORT["width"], "height": min(height + 200, 16000)})
        page.evaluate(JS.SCROLL_TOP)
        page.screenshot(path=str(self.shots / f"{name}.png"), full_page=True)
        page.set_viewport_size(VIEWPORT)


def _require_browser():
    """Playwright's sync API, or skip (fail under CI=true) when the browser tools are missing."""
    missing = []
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
        missing.append("the playwright package (test extras)")
    try:
        import PIL  # noqa: F401  (matplotlib's dependency: decodes the element screenshots)
    except ImportError:
        missing.append("Pillow (test extras)")
    if not os.path.exists(CHROMIUM):
        missing.append("chromium (apt-get install chromium)")
    if importlib.util.find_spec("jupyterlab") is None:
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


def _settings(root: pathlib.Path, plugin: str, values: dict[str, Any]) -> None:
    path = root / "settings" / f"{plugin}.jupyterlab-settings"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(values))


def _prepare(root: pathlib.Path) -> None:
    """Copies of the notebooks in `root/nb/notebooks` (the quickstart's run lasting RUN_SECONDS)
    beside links to the sources c_embedding builds, and a private Jupyter config."""
    nbdir = root / "nb" / "notebooks"
    nbdir.mkdir(parents=True)
    for sub in ("runtime_c", "examples"):  # c_embedding compiles them from its parent dir
        (root / "nb" / sub).symlink_to(REPO / sub)
    for path in NOTEBOOKS:
        shutil.copy(path, nbdir / path.name)
    nb = json.loads((nbdir / "quickstart.ipynb").read_text())
    runs = [
        c for c in nb["cells"] if c["cell_type"] == "code" and "%ipu run" in "".join(c["source"])
    ]
    assert len(runs) == 1
    src = "".join(runs[0]["source"])
    assert "--requests 400" in src
    src = src.replace("--requests 400", f"--seconds {RUN_SECONDS}")
    runs[0]["source"] = src.replace("== res.submitted == 400", "== res.submitted")
    (nbdir / "quickstart.ipynb").write_text(json.dumps(nb))
    _settings(root, "@jupyterlab/apputils-extension/notification", {"fetchNews": "false"})
    # every cell in the DOM, in view or not: the checks read every output
    _settings(root, "@jupyterlab/notebook-extension/tracker", {"windowingMode": "none"})


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


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    sync_playwright = _require_browser()
    root = tmp_path_factory.mktemp("lab")
    _prepare(root)
    port, token = _free_port(), secrets.token_hex(16)
    env = dict(
        os.environ,
        JUPYTER_RUNTIME_DIR=str(root / "rt"),
        JUPYTER_CONFIG_DIR=str(root / "cfg"),
        JUPYTERLAB_SETTINGS_DIR=str(root / "settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(root / "ws"),
    )
    env.pop("PYTHONSAFEPATH", None)
    # the kernelspec may say plain "python": this interpreter, the one with this pyipu
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    # a venv over system site packages imports the base's jupyterlab_widgets but looks for lab
    # extensions (the widget manager) only under its own prefix
    shares = [os.path.join(prefix, "share", "jupyter") for prefix in (sys.prefix, sys.base_prefix)]
    env["JUPYTER_PATH"] = os.pathsep.join([*shares, env.get("JUPYTER_PATH", "")])
    log = root / "lab.log"
    cmd = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        "--allow-root",
        "--ip=127.0.0.1",
        f"--port={port}",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root / 'nb'}",
        "--LabApp.expose_app_in_browser=True",
    ]
    with open(log, "w") as out:
        server = subprocess.Popen(
            cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_up(f"{base}/api/status?token={token}", server, log)
        with sync_playwright() as p:
            ctx = p.chromium.launch_persistent_context(
                str(root / "chrome-profile"),
                executable_path=CHROMIUM,
                headless=True,
                args=FLAGS,
                viewport=VIEWPORT,
            )
            try:
                yield Lab(base, token, root / "nb", ctx, _artifacts())
            finally:
                ctx.close()
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # the server and its kernels (own session)
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


def _run_all(page: Any) -> float:
    """Start Run All from the command registry (not awaited: the promise resolves only after
    every cell); returns the monotonic start time."""
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
    return time.monotonic()


def _wait_finished(
    page: Any, timeout: float, tick: Callable[[], bool | None] | None = None
) -> list[dict]:
    """Poll every 0.25 s (calling `tick`, which may return True to stop early) until the kernel
    is idle and every code cell ran or one raised; returns the cells."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if tick is not None and tick():
            break
        if page.evaluate(JS.FINISHED):
            break
        time.sleep(0.25)
    else:
        pytest.fail(f"the notebook did not finish in {timeout} s: {page.evaluate(JS.CELLS)}")
    return page.evaluate(JS.CELLS)


def _shutdown(page: Any) -> None:
    page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.shutdown()")
    page.close()


def _picture_problems(page: Any, name: str) -> list[str]:
    """Pixel checks on element screenshots of the heat maps and timelines on the page."""
    problems = []
    lanes = P.kind_lanes()
    for kind, check in (
        ("memory", P.heatmap_problems),
        ("timeline", lambda png: P.timeline_problems(png, lanes)),
    ):
        for i, img in enumerate(page.query_selector_all(f".ipu-figure-{kind} img")):
            png = img.screenshot()
            (pathlib.Path(_artifacts()) / f"{name}-{kind}-{i}.png").write_bytes(png)
            problems += [f"{kind} #{i}: {p}" for p in check(png)]
    return problems


def _quickstart_live(page: Any, lab: Lab, samples: list[dict]) -> Callable[[], bool | None]:
    """A tick sampling the run dashboard (and taking a mid-run screenshot once)."""
    shot = []

    def tick() -> None:
        s = page.evaluate(JS.SAMPLE_RUN)
        samples.append(s)
        if not shot and s and s["status"] == "running" and int(s["n"] or 0) >= 3:
            page.evaluate("() => document.querySelector('.ipu-run').scrollIntoView()")
            page.screenshot(path=str(lab.shots / "quickstart-midrun.png"))
            shot.append(True)

    return tick


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_in_jupyterlab(lab: Lab, path: pathlib.Path) -> None:
    name = path.stem
    page = lab.open(f"notebooks/{path.name}")
    samples: list[dict] = []
    try:
        _run_all(page)
        tick = _quickstart_live(page, lab, samples) if name == "quickstart" else None
        cells = _wait_finished(page, 240, tick)
        lab.screenshot(page, name)
        stderr = page.evaluate(JS.STDERR)
        pictures = page.evaluate(JS.PICTURES)
        problems = _picture_problems(page, name)
        contrast = page.evaluate(JS.CONTRAST)  # the light theme, the dark one is tested below
    finally:
        _shutdown(page)
    assert all(c["count"] for c in cells), f"a code cell did not run: {cells}"
    assert not [e for c in cells for e in c["errors"]], f"a cell raised: {cells}"
    assert stderr == [], f"stderr output: {stderr}"
    assert all(pictures.values()), f"a picture did not load: {pictures}"
    assert {k.removeprefix("ipu-figure-") for k in pictures} == FIGURES.get(name, set())
    assert problems == [], problems
    low = [t for t in contrast if t["ratio"] < 4.5]
    assert low == [], f"text below 4.5:1 contrast: {low[:10]}"
    if name == "quickstart":  # what the page showed while the run was going
        live = [s for s in samples if s and s["status"] == "running"]
        bars = {s["bar"] for s in live}
        points = {s["n"] for s in live}
        latencies = {s["latency"] for s in live}
        assert len(bars) >= 3, f"request bar did not move during the run: {samples}"
        assert len(points) >= 3, f"throughput chart did not grow: {sorted(map(str, points))}"
        assert len(latencies) >= 2, f"latency label did not change: {latencies}"


def _write_notebook(path: pathlib.Path, sources: list[str]) -> None:
    cells = [
        {
            "cell_type": "code",
            "execution_count": None,
            "id": f"c{i}",
            "metadata": {},
            "outputs": [],
            "source": src,
        }
        for i, src in enumerate(sources)
    ]
    meta = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
    nb = {"cells": cells, "metadata": meta, "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(nb))


def test_run_all_then_interrupt(lab: Lab) -> None:
    """Run All, then the kernel interrupt while `%ipu run --seconds 30` is busy."""
    _write_notebook(
        lab.root / "interrupt.ipynb",
        [
            "%load_ext pyipu.magics\nfrom pyipu import demo\nmodel = demo.demo_model()",
            "exe = %ipu compile model -q",
            "%ipu run exe --seconds 30",
            "after_the_run = True",
        ],
    )
    page = lab.open("interrupt.ipynb")
    try:
        start = _run_all(page)
        page.wait_for_function(JS.RUN_BUSY, timeout=60_000)
        page.click(INTERRUPT_BUTTON)  # the toolbar's stop button
        cells = _wait_finished(page, 60)
        elapsed = time.monotonic() - start
        run_text = page.evaluate(JS.OUTPUT_TEXT, 2)
        lab.screenshot(page, "interrupt")
        page.evaluate(JS.RUN_NEW_CELL, "print('kernel alive', 6 * 7)")
        page.wait_for_function(
            f"() => ({JS.OUTPUT_TEXT})(4).includes('kernel alive 42')", timeout=30_000
        )
        page.wait_for_function(JS.KERNEL_IDLE, timeout=30_000)
        new_cell = page.evaluate(JS.CELLS)[-1]
    finally:
        _shutdown(page)
    assert [c["count"] is not None for c in cells] == [True, True, True, False], cells
    assert cells[2]["errors"] and cells[2]["errors"][0].startswith("KeyboardInterrupt"), cells
    assert "KeyboardInterrupt" in run_text and "interrupted" in run_text, run_text
    assert new_cell["count"] == 4 and not new_cell["errors"], new_cell  # the next count
    assert elapsed < 20, f"Run All to interrupted took {elapsed:.1f} s"


DARK_CELLS = [
    "%load_ext pyipu.magics\nfrom pyipu import demo\nmodel = demo.demo_model()",
    "%ipu devices",
    "exe = %ipu compile model --batches-per-step 4",
    "exe8 = %ipu compile model --batches-per-step 8 -q",
    "res = %ipu run exe --requests 200 --threads 2 --record\nres",
    "res8 = %ipu run exe8 --requests 200 --threads 2",
    "%ipu compare res res8",
    "%ipu compare exe exe8",
    "%ipu profile exe --run res",
    "h = %ipu run exe --seconds 4 --background\nh",
]


def test_dark_theme_readable(lab: Lab) -> None:
    """The `%ipu` outputs under JupyterLab Dark: text contrast >= 4.5 (live widgets and final
    HTML), figures on their own opaque background."""
    _write_notebook(lab.root / "dark.ipynb", DARK_CELLS)
    page = lab.open("dark.ipynb")
    try:
        page.evaluate(
            "() => window.jupyterapp.commands.execute('apputils:change-theme', "
            "{theme: 'JupyterLab Dark'})"
        )
        page.wait_for_function("() => document.body.dataset.jpThemeLight === 'false'")
        _run_all(page)
        page.wait_for_function(JS.RUN_BUSY, timeout=120_000)  # the --background run's widgets
        live = page.evaluate(JS.CONTRAST)
        page.evaluate("() => document.querySelector('.ipu-run').scrollIntoView()")
        page.screenshot(path=str(lab.shots / "dark-live.png"))
        cells = _wait_finished(page, 120)
        # the --background run's handle: its widget, then its result when the run ends
        page.wait_for_function(
            "() => !document.querySelector('.ipu-run.widget-box') && "
            "document.querySelectorAll('.ipu-run-result').length >= 2",
            timeout=30_000,
        )
        final = page.evaluate(JS.CONTRAST)
        lab.screenshot(page, "dark")
        backgrounds = []
        for img in page.query_selector_all(".ipu-profile figure img"):
            behind = img.evaluate(JS.BACKGROUND_OF)
            corner = P.rgb(img.screenshot())[1, 1].tolist()
            backgrounds.append((behind, corner))
    finally:
        page.evaluate(
            "() => window.jupyterapp.commands.execute('apputils:change-theme', "
            "{theme: 'JupyterLab Light'})"
        )
        _shutdown(page)
    assert not [e for c in cells for e in c["errors"]], f"a cell raised: {cells}"
    classes = {t["cls"] for t in live + final}
    for needed in ("ipu-summary", "ipu-run", "ipu-run-result", "ipu-devices", "ipu-status"):
        assert needed in classes, f"no text checked in {needed}: {sorted(classes)}"
    low = [t for t in live + final if t["ratio"] < 4.5]
    assert low == [], f"text below 4.5:1 contrast: {low[:10]}"
    assert len(backgrounds) == len(FIGURES["quickstart"])  # a profile with a timeline
    for behind, corner in backgrounds:  # a transparent PNG would show the dark page here
        assert sum(abs(a - b) for a, b in zip(behind[:3], corner, strict=True)) > 60, backgrounds

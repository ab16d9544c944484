"""The `%ipu` magic driven through a real IPython InteractiveShell (no kernel, no browser):
arguments, help, devices, compile, run with live widgets, interrupt, the core's imports."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import numpy as np
import pytest
from magics_shell import require_notebook_libraries, shell, small_model
from onnx import numpy_helper

from pyipu import demo
from pyipu.compiler import Executable
from pyipu.runtime import RuntimeConfig

require_notebook_libraries()

import ipywidgets as W  # noqa: E402
from IPython.core.error import UsageError  # noqa: E402
from IPython.utils.capture import capture_output  # noqa: E402

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


@pytest.fixture(scope="module")
def ip() -> Any:
    ip = shell()
    ip.user_ns["small"] = small_model()
    ip.user_ns["seed"] = demo.seed_overlap_io_model(0, 1 / 16)
    return ip


@pytest.fixture(scope="module")
def exe(ip: Any) -> Executable:
    with capture_output():
        exe = ip.run_line_magic("ipu", "compile small -q")
    ip.user_ns["exe"] = exe
    return exe


@pytest.fixture(scope="module")
def seed_exe(ip: Any) -> Executable:
    with capture_output():
        exe = ip.run_line_magic("ipu", "compile seed -q")
    ip.user_ns["seed_exe"] = exe
    return exe


def test_core_package_never_imports_notebook_libraries() -> None:
    code = (
        "import sys, pyipu, pyipu.compiler, pyipu.runtime, pyipu.converter, pyipu.cli.main, "
        "pyipu.cli.popef_dump, pyipu.model_runtime\n"
        "bad = [m for m in ('IPython', 'ipywidgets', 'matplotlib') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-P", "-c", code], check=True)


@pytest.mark.parametrize(
    "line",
    [
        "",
        "bogus",
        "run",
        "compile",
        "run exe --requests 0",
        "run exe --requests 3 --seconds 1",
        "run exe --batch x",
        "compile small --num-io-tiles many",
        "compile small --available-memory-proportion 2",
        "compile no_such_variable_or_file",
        "run small",  # a ModelProto is not an executable
        "dump",
        "profile",
        "devices extra",
        "run exe --timeout-ns -5",
        "run exe --seconds inf",
        "compile small --num-io-tiles -3",
        "run exe --inputs no_such_variable",
        "profile exe --top 0",
    ],
)
def test_bad_arguments_raise_usage_error(ip: Any, exe: Executable, line: str) -> None:
    with pytest.raises(UsageError), capture_output():
        ip.run_line_magic("ipu", line)


def test_usage_error_is_shown_without_traceback(ip: Any) -> None:
    with capture_output() as cap:
        ip.run_cell("%ipu run --requests 0 nothing")
    assert "UsageError" in cap.stderr + cap.stdout
    assert "Traceback" not in cap.stderr + cap.stdout


def test_help_lists_every_verb_and_option(ip: Any) -> None:
    doc = ip.find_line_magic("ipu").__doc__
    for word in ("devices", "compile", "fuse", "run", "dump", "profile"):
        assert f"%ipu {word}" in doc
    for option in (
        "--batches-per-step",
        "--num-io-tiles",
        "--precision",
        "--threads",
        "--requests",
        "--seconds",
        "--batch",
        "--record",
        "--top",
    ):
        assert option in doc
    with capture_output() as cap:
        assert ip.run_line_magic("ipu", "run -h") is None
    assert "--requests" in cap.stdout


def test_devices_table(ip: Any) -> None:
    res = ip.run_line_magic("ipu", "devices")
    assert res.num_devices >= 1 and res.constants["tiles_per_ipu"] == 1472
    html = res._repr_html_()
    assert "memory_bytes_per_tile" in html and "638,976" in html


def test_compile_shows_progress_and_summary(ip: Any, tmp_path: Any) -> None:
    out = tmp_path / "small.popef"
    with capture_output() as cap:
        exe = ip.run_line_magic("ipu", f"compile small -o {out} --batches-per-step 2")
    assert isinstance(exe, Executable) and out.stat().st_size > 0
    assert exe.program.batches_per_step == 2
    assert any(WIDGET_VIEW in o.data for o in cap.outputs)
    html = ip.display_formatter.formatters["text/html"].lookup_by_type(Executable)(exe)
    for text in ("Anchors", "Memory (IPU Model)", "Estimated cycles", "batches_per_step", "x"):
        assert text in html
    # fp16 goes through the Converter
    with capture_output():
        half = ip.run_line_magic("ipu", "compile small -q --precision fp16")
    assert half.program.tensors[0].dtype.name == "FLOAT16"


def _record_values() -> tuple[list[tuple[str, float, int, Any]], list[Any]]:
    """Record every IntProgress 'value' change (thread name, time, value, bar) from now on, and
    the bars and labels constructed."""
    seen: list[tuple[str, float, int, Any]] = []
    bars: list[Any] = []

    def constructed(widget: Any) -> None:
        if isinstance(widget, W.Label):
            bars.append(widget)
        if isinstance(widget, W.IntProgress):
            bars.append(widget)
            widget.observe(
                lambda ch, w=widget: seen.append(
                    (threading.current_thread().name, time.perf_counter(), ch["new"], w)
                ),
                names="value",
            )

    W.Widget.on_widget_constructed(constructed)
    return seen, bars


def test_run_widgets_update_live_from_the_monitor_thread(ip: Any, seed_exe: Executable) -> None:
    seen, bars = _record_values()
    try:
        with capture_output() as cap:
            res = ip.run_line_magic("ipu", "run seed_exe --requests 80 --threads 1")
    finally:
        W.Widget.on_widget_constructed(lambda w: None)
    assert any(WIDGET_VIEW in o.data for o in cap.outputs)
    assert res.completed == 80 and res.failed == 0 and not res.interrupted
    requests_bar = next(b for b in bars if "ipu-requests" in b._dom_classes)
    live = [v for name, _, v, w in seen if w is requests_bar and name == "pyipu-magics-monitor"]
    assert len(set(live)) >= 2, live  # several distinct values while running
    assert requests_bar.value == 80 and requests_bar.bar_style == "success"
    labels = [w for w in bars if isinstance(w, W.Label)]
    assert any(
        re.fullmatch(r"80/80 in [\d.]+ s · [\d,]+ req/s · ETA [\d.]+ s", w.value) for w in labels
    )
    capacity = seed_exe.program.batches_per_step * RuntimeConfig().ring_buffer_size_multiplier
    assert any(re.fullmatch(rf"\d+ / {capacity}", w.value) for w in labels)  # queue numbers
    assert res.samples[-1].completed == 80
    assert any(
        s.queue_depth.get("input", 0) > 0 or s.queue_depth.get("output", 0) > 0 for s in res.samples
    )
    # the updater thread ended with the run
    assert not any(t.name == "pyipu-magics-monitor" for t in threading.enumerate())


def test_run_result_html_and_statistics(ip: Any, exe: Executable) -> None:
    with capture_output():
        res = ip.run_line_magic("ipu", "run exe --requests 30 --batch 2 --no-widgets")
    assert res.submitted == res.completed == 30
    assert res.stats["requests_completed"] == 30
    assert res.outputs["y"].shape == (8, 32)
    html = res._repr_html_()
    assert "Run of exe" in html and "30 / 0 / 30" in html and "latency p50" in html
    assert ip.user_ns["_ipu_last_run"] is res


def test_run_refuses_what_would_hang_or_fail(ip: Any) -> None:
    with capture_output():
        ip.user_ns["exe4"] = ip.run_line_magic("ipu", "compile small -q --batches-per-step 4")
    # the last, partial step would wait forever
    with pytest.raises(UsageError, match="batches_per_step 1"), capture_output():
        ip.run_line_magic("ipu", "run exe4 --timeout-ns 0")
    ip.user_ns["bad"] = {"x": np.zeros((3, 3), np.float32)}
    with pytest.raises(UsageError, match="do not fit.*expected shape"), capture_output() as cap:
        ip.run_line_magic("ipu", "run exe4 --inputs bad")
    assert cap.outputs == []  # refused before the dashboard is drawn
    ip.user_ns["misnamed"] = {"xx": np.zeros((4, 64), np.float32)}
    with pytest.raises(UsageError, match="unknown input 'xx'; did you mean 'x'"), capture_output():
        ip.run_line_magic("ipu", "run exe4 --inputs misnamed")
    with pytest.raises(UsageError, match="dict of input name"), capture_output():
        ip.run_line_magic("ipu", "run exe4 --inputs small")
    assert not any(t.name == "pyipu-magics-monitor" for t in threading.enumerate())


def test_run_with_seconds(ip: Any, exe: Executable) -> None:
    with capture_output():
        res = ip.run_line_magic("ipu", "run exe --seconds 0.3 --no-widgets")
    assert res.completed > 0 and res.submitted == res.completed
    assert res.seconds >= 0.3


def test_cell_run_uses_the_cells_inputs(ip: Any, exe: Executable) -> None:
    cell = "import numpy as np\ninputs = {'x': np.ones((4, 64), np.float32)}\n"
    with capture_output():
        res = ip.run_cell_magic("ipu", "run exe --requests 5 --no-widgets", cell)
    weights = numpy_helper.to_array(small_model().graph.initializer[0])
    expected = np.maximum(np.ones((4, 64), np.float32) @ weights, 0)
    np.testing.assert_allclose(res.outputs["y"], expected, rtol=1e-5, atol=1e-5)
    with pytest.raises(UsageError), capture_output():
        ip.run_cell_magic("ipu", "run exe --requests 1", "z = 1\n")
    with pytest.raises(UsageError), capture_output():
        ip.run_cell_magic("ipu", "run exe --requests 1", "inputs = 3\n")
    ip.user_ns["feeds"] = {"x": np.zeros((4, 64), np.float32)}
    with capture_output():
        res = ip.run_line_magic("ipu", "run exe --requests 3 --inputs feeds --no-widgets")
    assert res.completed == 3 and not res.outputs["y"].any()


def _interrupt_once_running(done: threading.Event) -> None:
    """SIGINT this process once the run's monitor thread exists (the run's handler is in place
    by then), as the notebook's stop button does to the kernel."""
    while not done.is_set():
        if any(t.name == "pyipu-magics-monitor" for t in threading.enumerate()):
            time.sleep(0.3)  # a few requests in
            os.kill(os.getpid(), signal.SIGINT)
            return
        time.sleep(0.02)


def test_interrupt_stops_the_run_cleanly(ip: Any, seed_exe: Executable) -> None:
    done = threading.Event()
    killer = threading.Thread(target=_interrupt_once_running, args=(done,))
    # what the run must restore: Python's handler, or SIG_IGN when the process started with
    # SIGINT ignored (a background job of a non-interactive shell)
    before = signal.getsignal(signal.SIGINT)
    start = time.perf_counter()
    killer.start()
    try:
        # the interrupt reaches the caller after the run has settled (Run All stops there)
        with pytest.raises(KeyboardInterrupt), capture_output() as cap:
            ip.run_line_magic("ipu", "run seed_exe --seconds 60 --threads 1")
    finally:
        done.set()
        killer.join()
    res = ip.user_ns["_ipu_last_run"]
    assert res.interrupted and time.perf_counter() - start < 30
    assert res.submitted > 0
    # every submitted request completed exactly once: ours and the runtime's counts agree
    assert res.completed + res.failed == res.submitted
    assert res.stats["requests_submitted"] == res.submitted
    assert res.stats["requests_completed"] + res.stats["requests_failed"] == res.submitted
    assert "interrupted" in cap.stdout
    assert signal.getsignal(signal.SIGINT) is before


def test_background_run_returns_at_once_and_stops_from_its_button(
    ip: Any, seed_exe: Executable
) -> None:
    with capture_output():
        handle = ip.run_line_magic("ipu", "run seed_exe --seconds 60 --threads 1 --background")
    assert not handle.done() and "in progress" in handle._repr_html_()
    assert handle.wait(timeout=0.01) is None
    deadline = time.monotonic() + 60
    while not handle._prepared.monitor.samples:  # running: the dashboard updates
        assert time.monotonic() < deadline and not handle.done()
        time.sleep(0.05)
    button = handle._prepared.dash.stop_button
    assert "ipu-stop" in button._dom_classes
    button.click()  # what the front end's click runs
    res = handle.wait(timeout=60)
    assert res is not None and res.interrupted and button.disabled
    requests_bar = handle._prepared.dash.progress
    assert requests_bar.value < requests_bar.max  # stopped early: the bar stays partial
    assert res.completed + res.failed == res.submitted == res.stats["requests_submitted"]
    assert ip.user_ns["_ipu_last_run"] is res and handle.result is res
    assert "Run of seed_exe" in handle._repr_html_()
    names = {t.name for t in threading.enumerate()}
    assert "pyipu-magics-monitor" not in names and "pyipu-magics-run" not in names


def test_background_run_without_widgets(ip: Any, exe: Executable) -> None:
    handle = ip.run_line_magic("ipu", "run exe --requests 20 --background --no-widgets")
    res = handle.wait(timeout=60)
    assert res.completed == 20 and not res.interrupted and handle.done()
    handle.stop()  # after the end: nothing to do
    assert repr(handle) == "<RunHandle exe: done>"


def test_bad_input_shape_is_a_one_line_usage_error(ip: Any) -> None:
    message = "unknown input 'xx'; did you mean 'x'"
    with pytest.raises(UsageError, match=message) as info, capture_output():
        ip.run_line_magic("ipu", "compile small -q --input-shape xx=4,64")
    assert "\n" not in str(info.value)


def test_help_has_no_rest_markup(ip: Any) -> None:
    doc = ip.find_line_magic("ipu").__doc__
    assert doc.lstrip().startswith("%ipu") and "::" not in doc.splitlines()


def test_background_handle_output_shows_how_the_run_ended(ip: Any, exe: Executable) -> None:
    handle = ip.run_line_magic("ipu", "run exe --seconds 60 --background --no-widgets")
    with capture_output():
        handle._ipython_display_()
    assert handle._display is not None and "in progress" in handle._repr_html_()
    updates = []
    handle._display.update = lambda obj: updates.append(obj.data)  # what the front end receives
    handle.stop()
    res = handle.wait(timeout=60)
    assert res is not None and len(updates) == 1
    assert "in progress" not in updates[0] and "Run of exe" in updates[0]


def test_run_output_var_keeps_the_result(ip: Any, exe: Executable) -> None:
    cell = "import numpy as np\ninputs = {'x': np.ones((4, 64), np.float32)}\n"
    with capture_output():
        ip.run_cell_magic("ipu", "run exe --requests 3 --no-widgets -o kept", cell)
    assert ip.user_ns["kept"].completed == 3 and ip.user_ns["kept"] is ip.user_ns["_ipu_last_run"]
    handle = ip.run_line_magic("ipu", "run exe --requests 2 --background --no-widgets -o h")
    assert ip.user_ns["h"] is handle and handle.wait(timeout=60).completed == 2
    with pytest.raises(UsageError, match="variable name"), capture_output():
        ip.run_line_magic("ipu", "run exe --requests 1 -o 1x")

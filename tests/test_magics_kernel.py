"""The `%ipu run` dashboard in a real IPython kernel (ipykernel through jupyter_client): the
monitor thread's widget updates reach the front end as comm messages while the cell runs, and
an interrupt sent to the kernel (the notebook's stop button) ends the run cleanly and stops a
Run All there."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest
from magics_shell import require_notebook_libraries

require_notebook_libraries()
if os.environ.get("CI") != "true":
    pytest.importorskip("ipykernel", reason="ipykernel is in the test extra")
    pytest.importorskip("jupyter_client", reason="jupyter_client comes with ipykernel")

from jupyter_client.manager import start_new_kernel  # noqa: E402

SETUP = """
%load_ext pyipu.magics
import warnings
warnings.simplefilter("ignore")
from pyipu import demo
model = demo.seed_overlap_io_model(0, 1 / 16)  # ~20 ms per request on one thread
exe = %ipu compile model -q
"""


@pytest.fixture()
def kernel(tmp_path: Any) -> Any:
    # cwd outside the source tree: the kernel imports the installed, compiled pyipu
    km, kc = start_new_kernel(kernel_name="python3", cwd=str(tmp_path))
    try:
        execute(kc, SETUP)
        yield km, kc
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def execute(kc: Any, code: str, timeout: float = 120.0, during: Any = None) -> list[dict]:
    """Run code; every iopub message of it until the kernel is idle again. `during(msgs)` is
    called on each message (e.g. to interrupt the kernel once the run has started)."""
    msg_id = kc.execute(code)
    messages = []
    deadline = time.monotonic() + timeout
    while True:
        msg = kc.get_iopub_msg(timeout=max(deadline - time.monotonic(), 0.1))
        messages.append(msg)
        if during is not None:
            during(messages)
        if msg["msg_type"] == "error" and msg["parent_header"].get("msg_id") == msg_id:
            raise AssertionError("\n".join(msg["content"]["traceback"]))
        if (
            msg["msg_type"] == "status"
            and msg["content"]["execution_state"] == "idle"
            and msg["parent_header"].get("msg_id") == msg_id
        ):
            return messages


def requests_bar_values(messages: list[dict]) -> list[int]:
    """The values the request progress bar (class ipu-requests) was set to, in order."""
    bar = None
    values = []
    for msg in messages:
        content = msg["content"]
        if msg["msg_type"] == "comm_open":
            state = content["data"].get("state", {})
            if "ipu-requests" in state.get("_dom_classes", ()):
                bar = content["comm_id"]
        elif msg["msg_type"] == "comm_msg" and content["comm_id"] == bar:
            state = content["data"].get("state", {})
            if content["data"].get("method") == "update" and "value" in state:
                values.append(state["value"])
    return values


def stdout_of(messages: list[dict]) -> str:
    return "".join(m["content"]["text"] for m in messages if m["msg_type"] == "stream")


def test_widgets_update_live_in_a_kernel(kernel: Any) -> None:
    _, kc = kernel
    messages = execute(kc, "res = %ipu run exe --requests 60 --threads 1\nprint(res)")
    values = requests_bar_values(messages)
    assert len(set(values)) >= 3, values  # several distinct values while the cell ran
    assert values[-1] == 60
    assert "60/60 completed" in stdout_of(messages)
    assert any(m["msg_type"] == "display_data" for m in messages)
    # the finished dashboard becomes static HTML, which a saved notebook shows without a kernel
    assert "60/60 in" in _settled_html(messages) and "<svg" in _settled_html(messages)


def test_compile_summary_settles_into_static_html(kernel: Any) -> None:
    _, kc = kernel
    html = _settled_html(execute(kc, "exe2 = %ipu compile model"))
    assert 'class="ipu-compile"' in html and "%ipu compile model" in html


def _settled_html(messages: list[dict]) -> str:
    """The text/html a live widget's output was replaced with (update_display_data)."""
    updates = [m for m in messages if m["msg_type"] == "update_display_data"]
    assert updates, [m["msg_type"] for m in messages]
    return updates[-1]["content"]["data"]["text/html"]


def test_interrupt_during_run_all_stops_the_run_and_the_queued_cells(kernel: Any) -> None:
    """Run All queues every cell; interrupting the one running `%ipu run` ends its run cleanly,
    fails that cell with KeyboardInterrupt, and the kernel aborts the queued cells."""
    km, kc = kernel
    first = kc.execute("%ipu run exe --seconds 60 --threads 1")
    second = kc.execute("print('the next cell ran')")
    sent: list[float] = []
    messages: list[dict] = []
    deadline = time.monotonic() + 90
    while not (sent and _idle_after(messages, second)) and time.monotonic() < deadline:
        messages.append(kc.get_iopub_msg(timeout=max(deadline - time.monotonic(), 0.1)))
        if not sent and len(requests_bar_values(messages)) >= 2:
            sent.append(time.monotonic())
            km.interrupt_kernel()  # SIGINT, as the notebook's stop button
    assert sent, "the run never started"
    replies = {}  # the shell channel also holds the replies of earlier cells
    while not {first, second} <= set(replies):
        reply = kc.get_shell_msg(timeout=30)
        replies[reply["parent_header"]["msg_id"]] = reply["content"]
    assert replies[first]["status"] == "error" and replies[first]["ename"] == "KeyboardInterrupt"
    assert replies[second]["status"] == "aborted"
    assert time.monotonic() - sent[0] < 30
    assert "the next cell ran" not in stdout_of(messages)
    assert "interrupted" in stdout_of(messages)
    # every submitted request completed once, and the kernel is still usable
    check = (
        "res = _ipu_last_run\n"
        "print('interrupted', res.interrupted, res.completed + res.failed == res.submitted,"
        " res.stats['requests_submitted'] == res.submitted)"
    )
    assert "interrupted True True True" in stdout_of(execute(kc, check))


def _idle_after(messages: list[dict], msg_id: str) -> bool:
    return any(
        m["msg_type"] == "status"
        and m["content"]["execution_state"] == "idle"
        and m["parent_header"].get("msg_id") == msg_id
        for m in messages
    )


def test_background_run_leaves_the_kernel_free_and_its_stop_button_works(kernel: Any) -> None:
    _, kc = kernel
    messages = execute(kc, "h = %ipu run exe --seconds 60 --threads 1 --background")
    stop = next(
        m["content"]["comm_id"]
        for m in messages
        if m["msg_type"] == "comm_open"
        and "ipu-stop" in m["content"]["data"]["state"].get("_dom_classes", ())
    )
    # another cell runs while the model does
    assert "running" in stdout_of(execute(kc, "print('running' if not h.done() else 'done')"))
    # the front end's click on the Stop button
    click = {"comm_id": stop, "data": {"method": "custom", "content": {"event": "click"}}}
    kc.shell_channel.send(kc.session.msg("comm_msg", click))
    code = (
        "res = h.wait(60)\n"
        "print('stopped', res.interrupted, res.completed + res.failed == res.submitted)"
    )
    assert "stopped True True" in stdout_of(execute(kc, code, timeout=90))

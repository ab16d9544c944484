"""The runtime options table (pyipu/_options.py): generated code is current, the Python layers
take their defaults and checks from it, and session options reach the C session."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from models import scale_model

from pyipu import _options as opt
from pyipu import errors
from pyipu.compiler import Compiler
from pyipu.model_runtime import Session, SessionConfig
from pyipu.runtime import RuntimeConfig

REPO = Path(__file__).resolve().parent.parent
GEN = REPO / "tools" / "gen_config.py"


def _generator():
    spec = importlib.util.spec_from_file_location("gen_config", GEN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_regions_are_current():
    done = subprocess.run(
        [sys.executable, str(GEN), "--check"], capture_output=True, text=True, cwd=REPO
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_hand_edited_region_is_stale_and_regenerated():
    gen = _generator()
    path = "runtime_c/src/runtime/session.c"
    text = (REPO / path).read_text()
    edited = text.replace("c.pin_threads = 1;", "c.pin_threads = 0;")
    assert edited != text
    assert gen.render(path, edited) == text  # what --check compares against
    with pytest.raises(SystemExit, match="expected one"):
        gen.render(path, text.replace("END GENERATED defaults", "END"))


def test_one_default_per_option_in_every_python_layer():
    config, session = RuntimeConfig(), SessionConfig()
    for o in opt.options(opt.PY_RUNTIME):
        if o.ctype != opt.OBJECT:
            assert getattr(config, o.name) == o.python_default, o.name
    for o in opt.options(opt.PY_SESSION):
        assert getattr(session, o.name) == o.python_default, o.name
    assert config.pin_threads is True and session.pin_threads is True


def test_values_outside_the_table_range_are_refused():
    with pytest.raises(errors.InvalidArgumentError, match="ring_buffer_size_multiplier"):
        RuntimeConfig(ring_buffer_size_multiplier=0)
    with pytest.raises(errors.InvalidArgumentError, match="batching_dim"):
        RuntimeConfig(batching_dim=2**32)
    with pytest.raises(errors.InvalidArgumentError, match="pin_threads must be a bool"):
        RuntimeConfig(pin_threads="yes")
    with pytest.raises(errors.UnsupportedError, match="runner_type"):
        RuntimeConfig(runner_type=1)  # PackRunner
    assert RuntimeConfig(runner_type=2).runner_type == 2
    assert RuntimeConfig(num_threads=None).num_threads is None
    exe = Compiler.compile(scale_model(), None)
    for bad in (SessionConfig(num_threads=0), SessionConfig(pin_threads=[])):
        with pytest.raises(errors.InvalidArgumentError, match="SessionConfig"):
            Session(exe, bad).create_queue_manager()


def test_environment_integers_share_the_range_check(monkeypatch):
    from pyipu import _config

    monkeypatch.setenv("PYIPU_NUM_DEVICES", "0")
    with pytest.raises(errors.InvalidArgumentError, match="PYIPU_NUM_DEVICES must be an int"):
        _config.num_devices()


def _single_cpu_threads() -> int:
    """Threads of this process allowed on exactly one CPU (pinned)."""
    count = 0
    for task in os.listdir("/proc/self/task"):
        try:
            status = Path(f"/proc/self/task/{task}/status").read_text()
        except FileNotFoundError:  # the thread ended meanwhile
            continue
        allowed = next(x for x in status.splitlines() if x.startswith("Cpus_allowed_list"))
        cpus = allowed.split(":")[1].strip()
        count += "," not in cpus and "-" not in cpus
    return count


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or len(os.sched_getaffinity(0)) < 2,
    reason="pinning needs Linux and at least 2 CPUs",
)
@pytest.mark.parametrize("pin", [True, False])
def test_session_pin_threads_reaches_the_c_session(pin):
    exe = Compiler.compile(scale_model(), None)
    before = _single_cpu_threads()
    with Session(exe, SessionConfig(num_threads=2, pin_threads=pin)) as session:
        qm = session.create_queue_manager()  # creates the C session and its helper thread
        assert _single_cpu_threads() - before == (1 if pin else 0)
        session.run_load_programs()
        x = np.arange(12, dtype=np.float32).reshape(4, 3)
        y = np.zeros_like(x)
        qm.input_queue("X").enqueue(x)
        qm.output_queue("Y").enqueue(y)
        session.run_main_programs()
        np.testing.assert_allclose(y, 2 * x + 1)

"""The demo run as a user runs it, and stopped as a terminal's Ctrl-C stops it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class DemoRun:
    returncode: int
    output: str  # stdout
    err: str  # stderr


def interrupt_demo(tmp_path: Path, *args: str, after_batches: int = 1) -> DemoRun:
    """``examples/demo.py *args`` with a real SIGINT to its process group once ``after_batches`` batch lines were
    printed; the demo's work folder in ``tmp_path`` (TMPDIR)."""
    demo = subprocess.Popen([sys.executable, "examples/demo.py", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "TMPDIR": str(tmp_path), "PYTHONUNBUFFERED": "1"})
    seen: list[str] = []
    try:
        assert demo.stdout is not None and demo.stderr is not None
        for line in demo.stdout:
            seen.append(line)
            if sum(line.startswith("batch ") for line in seen) == after_batches:
                break
        else:
            pytest.fail(f"the demo ended before batch line {after_batches}: {''.join(seen)}{demo.stderr.read()}")
        os.killpg(demo.pid, signal.SIGINT)
        out, err = demo.communicate(timeout=240)
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
    return DemoRun(demo.returncode, "".join(seen) + out, err)

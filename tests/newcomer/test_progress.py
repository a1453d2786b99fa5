"""Item 9: long work shows progress — a rich bar for counted steps on a terminal, plain lines in logs."""

from __future__ import annotations

import io
import sys
from pathlib import Path

from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tools._cli import ProgressView  # noqa: E402


def test_terminal_gets_a_bar_for_counted_steps():
    buf = io.StringIO()
    view = ProgressView(Console(file=buf, force_terminal=True, width=100))
    view.say("vllm: applying 4 patches")
    assert view.bar is not None and view.bar.tasks[0].total is None  # uncounted: a spinner
    view.say("vllm: 3/17 some-patch.patch: clean")
    task = view.bar.tasks[0]
    assert (task.completed, task.total) == (3, 17)
    view.say("downloading vllm-0.28.0.tar.gz")
    assert view.bar.tasks[0].total is None
    view.stop()
    assert view.bar is None
    text = buf.getvalue()
    assert "· vllm: 3/17 some-patch.patch: clean" in text  # every message also kept as a line


def test_logs_get_plain_lines_only():
    buf = io.StringIO()
    view = ProgressView(Console(file=buf, force_terminal=False, width=100))
    view.say("fetching [main] from mirror")  # brackets are text, not markup
    view.say("vllm: 1/4 x.patch: clean")
    assert view.bar is None
    assert buf.getvalue().splitlines() == ["· fetching [main] from mirror", "· vllm: 1/4 x.patch: clean"]


def test_versions_and_dates_are_not_counts():
    buf = io.StringIO()
    view = ProgressView(Console(file=buf, force_terminal=True, width=100))
    view.say("vllm: base from sdist:vllm==0.27.1 2026/12/01")
    assert view.bar.tasks[0].total is None
    view.stop()

"""The pytest runs the tool starts (`regress`, and the intent runs of `bump`, `pin`, `status --check`)
keep their temporary folders inside their own scratch folder. pytest otherwise numbers a new folder
in /tmp/pytest-of-<user> and deletes all but the three newest there: the folders of another pytest
running at the same time (a test suite that calls the tool, a second checkout) went from under it."""

from __future__ import annotations

import getpass
from pathlib import Path

import pytest

from dsv4_patch.bump.semantic import run_intent_tests
from dsv4_patch.regress import run_pytest

TEST = """
import os
from pathlib import Path

def test_uses_tmp_path(tmp_path):
    (tmp_path / "x").write_text("x")
    if os.environ.get("WHERE_FILE"):
        Path(os.environ["WHERE_FILE"]).write_text(str(tmp_path))
"""


def _foreign_runs(temproot: Path) -> list[Path]:
    """Four numbered folders of another pytest run in the system's pytest folder, none locked (an
    xdist run's, or one whose lock has gone): what pytest's clean-up deletes beyond the newest three."""
    user = getpass.getuser()
    runs = []
    for i in range(4):
        d = temproot / f"pytest-of-{user}" / f"pytest-{i}"
        (d / "popen-gw0").mkdir(parents=True)
        (d / "popen-gw0" / "in-use").write_text("")
        runs.append(d)
    return runs


NODE = "tests/test_child.py::test_uses_tmp_path"


def _project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    (project / "tests").mkdir(parents=True)
    (project / "tests" / "test_child.py").write_text(TEST)
    return project


@pytest.mark.parametrize("runner", ["regress", "intent"])
def test_a_child_run_leaves_other_runs_temporary_folders_alone(tmp_path, runner):
    project = _project(tmp_path)
    temproot = tmp_path / "system-tmp"
    runs = _foreign_runs(temproot)
    env = {"PYTEST_DEBUG_TEMPROOT": str(temproot)}  # where pytest puts pytest-of-<user>
    node = NODE
    if runner == "regress":
        rc, outcomes = run_pytest(project, [node], env)
        assert rc == 0 and outcomes[node]["outcome"] == "passed", outcomes
    else:
        got = run_intent_tests(project, [node], env)
        assert got[node]["outcome"] == "passed", got
    assert all((d / "popen-gw0" / "in-use").is_file() for d in runs)
    assert sorted(p.name for p in runs[0].parent.iterdir()) == [d.name for d in runs]  # and made none there


@pytest.mark.parametrize("runner, given", [("regress", "pytest_args"), ("regress", "PYTEST_ADDOPTS"),
                                           ("intent", "PYTEST_ADDOPTS")])  # intent runs take no pytest args
def test_a_basetemp_the_caller_gives_is_the_one_used(tmp_path, given, runner):
    project = _project(tmp_path)
    mine = tmp_path / "my-basetemp"
    where = tmp_path / "where.txt"
    env = {"WHERE_FILE": str(where)}
    args: tuple[str, ...] = ()
    if given == "pytest_args":
        args = (f"--basetemp={mine}",)
    else:
        env["PYTEST_ADDOPTS"] = f"--basetemp={mine}"
    if runner == "regress":
        rc, outcomes = run_pytest(project, [NODE], env, pytest_args=args)
        assert rc == 0 and outcomes[NODE]["outcome"] == "passed", outcomes
    else:
        assert run_intent_tests(project, [NODE], env)[NODE]["outcome"] == "passed"
    assert Path(where.read_text()).parent == mine


@pytest.mark.parametrize("runner", ["regress", "intent"])
def test_a_basetemp_inherited_from_our_own_environment_is_left_alone(tmp_path, monkeypatch, runner):
    """PYTEST_ADDOPTS in the tool's own environment (the shell's, or a pytest run that calls the
    tool) may name that run's basetemp; pytest empties a basetemp it is given, so the child must not
    take it: the calling run's folders would go from under it."""
    project = _project(tmp_path)
    outer = tmp_path / "outer-basetemp"
    (outer / "test_running0").mkdir(parents=True)
    (outer / "test_running0" / "in-use").write_text("")
    monkeypatch.setenv("PYTEST_ADDOPTS", f"--basetemp={outer}")
    where = tmp_path / "where.txt"
    env = {"WHERE_FILE": str(where)}
    if runner == "regress":
        rc, outcomes = run_pytest(project, [NODE], env)
        assert rc == 0 and outcomes[NODE]["outcome"] == "passed", outcomes
    else:
        assert run_intent_tests(project, [NODE], env)[NODE]["outcome"] == "passed"
    assert (outer / "test_running0" / "in-use").is_file()
    assert outer not in Path(where.read_text()).parents

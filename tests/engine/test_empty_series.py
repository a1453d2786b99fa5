"""A stack whose series is empty (patches/deepgemm after its two patches were dropped): every command says
"0 patches" and succeeds; regress fetches nothing to test nothing."""

from __future__ import annotations

import json

from test_cli import cli


def test_apply_builds_the_pin_with_0_patches(env):
    p = cli(env, "apply", "demo", check=0)
    assert "0 patches on" in p.stdout + p.stderr
    assert (env.out / "demo" / "src" / "a.py").is_file()


def test_check_and_export_check_are_clean(env):
    cli(env, "apply", "demo", check=0)
    assert json.loads(cli(env, "check", "demo", "--json", check=0).stdout) == []
    assert "up to date" in cli(env, "export", "demo", "--check", check=0).stdout


def test_matrix_says_the_series_is_empty(env):
    p = cli(env, "status", "--matrix", check=0)
    assert "demo:" in p.stdout and "(no patches in series)" in p.stdout
    assert json.loads(cli(env, "status", "--matrix", "--json", check=0).stdout)[0]["patches"] == []


def test_regress_says_0_patches_and_builds_no_tree(env):
    p = cli(env, "regress", "demo", check=0)
    assert "demo: 0 patches in series, nothing to test" in p.stdout
    rep = json.loads(cli(env, "regress", "demo", "--json", check=0).stdout)
    assert rep["ok"] and rep["patches"] == [] and rep["no_patches"] == ["demo"]
    assert json.loads(cli(env, "regress", "demo", "--bisect", "--json", check=0).stdout)["no_patches"] == ["demo"]
    assert not (env.out / "demo").exists()  # nothing fetched, nothing built


def test_regress_record_of_an_empty_stack_writes_no_result(env):
    cli(env, "regress", "demo", "--record", "apply,unit", check=0)
    assert not list((env.root / "patches" / "demo").glob("results/*.json"))

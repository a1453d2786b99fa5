"""Item 5: `pin STACK REF` (and --dry-run) checks that the stack still applies at REF and names each
patch that does not; such a pin is refused unless --force."""

from __future__ import annotations

import json

from synth import numbered


def _git_sourced(env):
    """The synthetic stack, fetched through a git source (pins move only on git/sdist/wheel sources)."""
    toml = env.root / "patches/stacks.toml"
    toml.write_text(toml.read_text().replace('kind = "path"\npath = ', 'kind = "git"\nurl = '))


def _two_patches_then_upstream_breaks_the_first(env):
    (env.root / "tests").mkdir(exist_ok=True)
    (env.root / "tests/test_demo.py").write_text("def test_ok():\n    pass\n")
    body = "Why.\n\nUpstream-Status: Pending\nRegression-Test: tests/test_demo.py::test_ok\nSigned-off-by: Pat Cher <pat@example.com>\n"
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three", body=body)
    env.author({"src/b.txt": numbered(30, "b").replace("b 7\n", "b seven\n")}, "[DSV4] Seven", body=body)
    env.up.write("src/a.py", numbered(60).replace("line 3\n", "line 3 (upstream)\n"))
    return env.up.commit("upstream rewrites line 3")


def test_pin_refuses_a_ref_where_patches_stop_applying_and_names_them(env, cli):
    _git_sourced(env)
    new = _two_patches_then_upstream_breaks_the_first(env)
    toml = env.root / "patches/stacks.toml"
    before = toml.read_text()
    p = cli(env, "pin", "demo", new, check=3)
    assert "1 of 2 patches do not apply" in p.stderr and "three.patch (conflict in src/a.py)" in p.stderr
    assert "seven.patch" not in p.stderr.split("do not apply")[1].split("(`")[0]  # only the broken one
    assert "dsv4-patch bump demo" in p.stderr
    assert toml.read_text() == before  # nothing written

    p = cli(env, "pin", "demo", new, "--dry-run", check=3)
    assert "would update" in p.stdout and "three.patch (conflict in src/a.py)" in p.stdout
    assert toml.read_text() == before

    p = cli(env, "pin", "demo", new, "--dry-run", "--json", check=3)
    verdict = json.loads(p.stdout)["applies"]
    assert verdict["checked"] and not verdict["ok"] and [b["patch"] for b in verdict["broken"]] == ["three.patch"]

    cli(env, "pin", "demo", new, "--force", check=3)
    assert new in toml.read_text()


def test_pin_to_a_ref_where_everything_applies_says_so(env, cli):
    _git_sourced(env)
    (env.root / "tests").mkdir(exist_ok=True)
    (env.root / "tests/test_demo.py").write_text("def test_ok():\n    pass\n")
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three",
               body="Why.\n\nUpstream-Status: Pending\nRegression-Test: tests/test_demo.py::test_ok\nSigned-off-by: Pat Cher <pat@example.com>\n")
    env.up.write("src/b.txt", numbered(30, "b").replace("b 20\n", "b twenty\n"))
    new = env.up.commit("unrelated upstream change")
    p = cli(env, "pin", "demo", new, check=0)
    assert "the one patch applies at" in p.stdout and "updated patches/stacks.toml" in p.stdout
    assert new in (env.root / "patches/stacks.toml").read_text()


def test_pin_runs_none_of_the_bound_tests(env, cli, tmp_path):
    """The check rebases the stack and nothing more: running the patches' tests (their intent at REF,
    their regression) is `bump`'s and `regress`'s work, not a side effect of moving a pin."""
    _git_sourced(env)
    ran = tmp_path / "ran"
    (env.root / "tests").mkdir(exist_ok=True)
    (env.root / "tests/test_demo.py").write_text(
        f"from pathlib import Path\n\ndef test_ok():\n    Path({str(ran)!r}).touch()\n")
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three",
               body="Why.\n\nUpstream-Status: Pending\nRegression-Test: tests/test_demo.py::test_ok\nSigned-off-by: Pat Cher <pat@example.com>\n")
    env.up.write("src/a.py", numbered(60).replace("line 3\n", "line 3 (upstream)\n"))
    new = env.up.commit("upstream rewrites line 3")
    p = cli(env, "pin", "demo", new, "--dry-run", check=3)
    assert "three.patch (conflict in src/a.py)" in p.stdout
    assert not ran.exists()

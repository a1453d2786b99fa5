"""Start-up of the CLI and the no-op apply: what they import, how many git processes they run,
and the memo that lets a stacks.toml that passed the schema skip pydantic.

All behaviour, none of it timing: benchmarks/bench_cli_noop.py measures the time.
- a no-op `apply`, `apply --help` and `--help` import none of the heavy modules (checked in
  sys.modules of a real CLI process), and a no-op does not even parse the patches; a changed stacks.toml does import pydantic (so the check
  can fail);
- the no-op runs at most two git processes per tree, counted where every git process starts
  (gitcmd.Git._argv);
- the memo: a remembered text skips validation, any other text (one byte changed) does not; a
  forged, corrupt or foreign entry is ignored; a key that is not ours or readable by others turns
  the memo off; errors are the same whatever the memo holds;
- tools/typer_fastpath.py: the oracle is Typer's own coercion, on a table of parameter kinds and
  values (results and error messages must be equal).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import List, Optional

import pytest
import typer

from dsv4_patch import config, configmemo
from dsv4_patch.errors import ConfigError
from dsv4_patch.gitcmd import Git

from synth import author_commit, numbered

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("pydantic", "dsv4_patch.config_schema", "dsv4_patch.e2e", "dsv4_patch.bump", "dsv4_patch.regress",
         "dsv4_patch.resolve", "dsv4_patch.sources.archive", "dsv4_patch.fastapply",
         "email.parser", "dsv4_patch.lint")  # the last two: a no-op reads the patch bytes, it does not parse them

PROBE = r"""
import json, sys
heavy = json.loads(sys.argv[2])
sys.argv = ["dsv4-patch", *json.loads(sys.argv[1])]  # the script's name: commands registered as when installed
from tools import applypatch
code = 0
try:
    applypatch.main()
except SystemExit as e:
    code = e.code
print("\n@@" + json.dumps({"code": code, "loaded": [m for m in heavy if m in sys.modules]}))
"""


def probe(env, *args: str) -> tuple[int, list[str], str]:
    """Run the CLI in a fresh process (cwd: the project); (exit code, heavy modules it imported, output)."""
    p = subprocess.run([sys.executable, "-c", PROBE, json.dumps(args), json.dumps(HEAVY)], cwd=env.root,
                       capture_output=True, text=True,
                       env={**os.environ, "DSV4_PATCH_CACHE": str(env.cache.root), "PYTHONPATH": str(ROOT),
                            "COLUMNS": "100"})
    out, _, tail = p.stdout.rpartition("\n@@")
    assert tail, p.stdout + p.stderr
    res = json.loads(tail)
    return res["code"], res["loaded"], out + p.stderr


def one_patch(env) -> None:
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "Fix line three")


def test_noop_apply_and_help_import_none_of_the_heavy_modules(env):
    one_patch(env)
    code, loaded, out = probe(env, "apply", "demo")  # validates stacks.toml (another cache: not remembered yet)
    assert code == 0 and "pydantic" in loaded, (out, loaded)
    code, loaded, out = probe(env, "apply", "demo")
    assert code == 0 and "unchanged" in out, out
    assert loaded == [], loaded
    code, loaded, out = probe(env, "apply", "--out", str(env.out), "--project", str(env.root), "--release", "v0")
    assert code == 2 and "no stack has release 'v0'" in out and loaded == [], (loaded, out)  # Path and list params given
    code, loaded, out = probe(env, "apply", "--out", str(env.out), "--project", str(env.root))
    assert code == 0 and "unchanged" in out and loaded == [], (loaded, out)
    for args in (["apply", "--help"], ["--help"]):
        code, loaded, out = probe(env, *args)
        assert code == 0 and "Usage:" in out and loaded == [], (args, loaded)
    assert "\n  bump " in out and "\n  e2e " in out  # registered (cheaply), so listed


def test_a_changed_stacks_toml_is_validated_again_then_remembered(env):
    one_patch(env)
    probe(env, "apply", "demo")
    toml = env.root / "patches" / "stacks.toml"
    toml.write_text(toml.read_text() + "# one more line\n")
    code, loaded, out = probe(env, "apply", "demo")
    assert code == 0 and "pydantic" in loaded and "dsv4_patch.config_schema" in loaded, loaded
    code, loaded, out = probe(env, "apply", "demo")
    assert code == 0 and loaded == [], loaded


def test_the_noop_runs_at_most_two_git_processes_per_tree(env, monkeypatch):
    one_patch(env)
    env.apply()
    calls: list[list[str]] = []
    real = Git._argv

    def counted(self, args):
        calls.append([str(a) for a in args])
        return real(self, args)

    monkeypatch.setattr(Git, "_argv", counted)
    res = env.apply()
    assert res.status == "noop"
    assert [c[0] for c in calls] == ["status", "for-each-ref"], calls
    # and a local edit is still seen by those two processes
    (res.tree / "src/a.py").write_text("edited\n")
    calls.clear()
    with pytest.raises(Exception, match="uncommitted changes \\(1 paths\\)"):
        env.apply()
    assert [c[0] for c in calls[:2]] == ["status", "for-each-ref"], calls  # then the hint looks at the files


def test_local_work_counts_each_kind_of_path_once(env):
    """status --porcelain=v2: one line per path (renames and untracked included), HEAD from its header."""
    one_patch(env)
    tree = env.apply().tree
    g = Git(tree)
    (tree / "src/b.txt").write_text("changed\n")
    (tree / "new.txt").write_text("untracked\n")
    g.run("mv", "src/a.py", "src/moved.py")  # a staged rename: one entry naming two paths
    from dsv4_patch.localwork import head_and_changes

    head, changed = head_and_changes(g)
    assert head == g.rev("HEAD") and changed == len(g.out("status", "--porcelain").splitlines()) == 3


def test_an_unborn_head_is_none(tmp_path):
    from dsv4_patch.gitcmd import init_repo
    from dsv4_patch.localwork import head_and_changes

    assert head_and_changes(init_repo(tmp_path / "r")) == (None, 0)


# ---------------------------------------------------------------- the memo
GOOD = """
[stacks.demo]
upstream = "https://example.invalid/demo"
commit = "abc123"

[[stacks.demo.sources]]
kind = "path"
path = "/nowhere"
"""
BAD = [
    GOOD.replace('commit = "abc123"', 'commit = "abc123"\nsha265 = "x"'),  # unknown key
    GOOD.replace('commit = "abc123"\n', ""),  # missing key (building the project would crash)
    GOOD.replace('commit = "abc123"', "commit = 123"),  # wrong type (.lower() would crash)
    GOOD.replace('kind = "path"', 'kind = "svn"'),
    GOOD.replace('upstream = "https://example.invalid/demo"', 'upstream = ""'),
]


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project folder, a private cache, and a count of the schema validations."""
    monkeypatch.setenv("DSV4_PATCH_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "proj"
    (root / "patches" / "demo").mkdir(parents=True)
    runs = []
    real = config._validate
    monkeypatch.setattr(config, "_validate", lambda *a: (runs.append(1), real(*a))[1])
    return root, runs


def load(root: Path, text: str):
    (root / "patches" / "stacks.toml").write_text(text)
    return config.load_project(root)


def error_of(root: Path, text: str) -> str:
    with pytest.raises(ConfigError) as e:
        load(root, text)
    return e.value.one_line()


def entry_path(text: str) -> Path:
    return configmemo._folder() / f"{configmemo._entry(text)[1]}.json"


def test_a_remembered_text_skips_validation_and_any_other_text_does_not(project):
    root, runs = project
    assert [c.label for c in load(root, GOOD).targets()] == ["demo"] and len(runs) == 1
    assert [c.label for c in load(root, GOOD).targets()] == ["demo"] and len(runs) == 1  # remembered
    load(root, GOOD + " ")
    assert len(runs) == 2  # one byte more: validated
    key = (configmemo._folder() / "key")
    assert key.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("bad", BAD)
def test_errors_are_the_schemas_own_whatever_the_memo_holds(project, bad):
    root, _ = project
    fresh = error_of(root, bad)
    load(root, GOOD)  # a key and an entry exist now
    key = (configmemo._folder() / "key").read_bytes()
    blob, _ = configmemo._entry(bad)
    forged = [
        {"format": 1, "mac": hmac.new(b"\0" * 32, blob, "sha256").hexdigest()},  # another key
        {"format": 1, "mac": hashlib.sha256(blob).hexdigest()},  # no key at all
        {"format": 1, "mac": hmac.new(key, blob + b" ", "sha256").hexdigest()},  # made for another text
        {"format": 1},
        {"format": 1, "mac": 7},
    ]
    for entry in forged:
        entry_path(bad).write_text(json.dumps(entry))
        assert error_of(root, bad) == fresh, entry


@pytest.mark.parametrize("bad", BAD[1:3])
def test_a_text_the_project_cannot_be_built_from_is_validated_even_if_remembered(project, bad):
    """An entry with a valid MAC under our own key: the cache of our own user lies. Where building
    the project fails (a missing key, a wrong type), the schema is asked, and its error shown."""
    root, _ = project
    fresh = error_of(root, bad)
    load(root, GOOD)  # makes the key
    key = (configmemo._folder() / "key").read_bytes()
    blob, _ = configmemo._entry(bad)
    entry_path(bad).write_text(json.dumps({"format": 1, "mac": hmac.new(key, blob, "sha256").hexdigest()}))
    assert configmemo.validated(bad)
    assert error_of(root, bad) == fresh


def test_a_lying_memo_of_our_own_user_is_the_one_thing_trusted(project):
    """Documented limit: an entry with a valid MAC under our own key (which only we can read) is
    believed; a text that builds, such as one with an unknown key, is then not reported."""
    root, runs = project
    load(root, GOOD)
    key = (configmemo._folder() / "key").read_bytes()
    blob, _ = configmemo._entry(BAD[0])
    entry_path(BAD[0]).write_text(json.dumps({"format": 1, "mac": hmac.new(key, blob, "sha256").hexdigest()}))
    assert load(root, BAD[0]).stack("demo").commit == "abc123" and len(runs) == 1


def test_corrupt_entries_are_ignored_and_replaced(project, tmp_path):
    root, runs = project
    load(root, GOOD)
    f = entry_path(GOOD)
    other = tmp_path / "other.json"
    other.write_text(f.read_text())
    for corrupt in ("garbage", "", "[]", '{"format": 2, "mac": "00"}', "x" * 5000, "symlink", "dir", "fifo"):
        if f.is_dir():
            f.rmdir()
        else:
            f.unlink(missing_ok=True)
        if corrupt == "symlink":
            f.symlink_to(other)  # a link to a valid-looking entry: not followed
        elif corrupt == "dir":
            f.mkdir()
        elif corrupt == "fifo":
            os.mkfifo(f)  # would block a plain open()
        else:
            f.write_text(corrupt)
        n = len(runs)
        assert load(root, GOOD).stack("demo").commit == "abc123"
        assert len(runs) == n + 1, corrupt
        if corrupt not in ("dir",):
            assert configmemo.validated(GOOD), corrupt  # replaced by a good entry


@pytest.mark.parametrize("how", ["others can read it", "wrong length", "a symlink", "a folder"])
def test_a_key_that_is_not_ours_alone_turns_the_memo_off(project, tmp_path, how):
    root, runs = project
    load(root, GOOD)
    key = configmemo._folder() / "key"
    if how == "others can read it":
        key.chmod(0o644)
    elif how == "wrong length":
        key.write_bytes(key.read_bytes() + b"x")
    elif how == "a symlink":
        target = tmp_path / "k"
        target.write_bytes(key.read_bytes())
        target.chmod(0o600)
        key.unlink()
        key.symlink_to(target)
    else:
        key.unlink()
        key.mkdir()
    assert not configmemo.validated(GOOD)
    load(root, GOOD)
    load(root, GOOD)
    assert len(runs) == 3  # validated every time


def test_an_unwritable_cache_only_means_validating_every_time(project, monkeypatch, tmp_path):
    root, runs = project
    blocker = tmp_path / "file-not-folder"
    blocker.write_text("")
    monkeypatch.setenv("DSV4_PATCH_CACHE", str(blocker))
    load(root, GOOD)
    load(root, GOOD)
    assert len(runs) == 2


def test_another_schema_gives_other_entries(project, monkeypatch):
    root, runs = project
    load(root, GOOD)
    real = configmemo._fingerprint
    monkeypatch.setattr(configmemo, "_fingerprint", lambda: real() + b"schema v2")
    load(root, GOOD)
    assert len(runs) == 2


# ---------------------------------------------------------------- typer_fastpath against Typer itself
def _cli_params():
    app = typer.Typer()

    @app.command()
    def cmd(
        names: Optional[List[str]] = typer.Argument(None),
        text: Optional[str] = typer.Option(None, "--text"),
        plain: str = typer.Option("d", "--plain"),
        many: Optional[List[str]] = typer.Option(None, "--many"),
        where: Optional[Path] = typer.Option(None, "--where"),
        must: Optional[Path] = typer.Option(None, "--must", exists=True),
        no_file: Optional[Path] = typer.Option(None, "--no-file", file_okay=False),
        no_dir: Optional[Path] = typer.Option(None, "--no-dir", dir_okay=False),
        resolved: Optional[Path] = typer.Option(None, "--resolved", resolve_path=True),
        dash: Optional[Path] = typer.Option(None, "--dash", allow_dash=True),
        count: int = typer.Option(1, "--count"),
        parsed: Optional[str] = typer.Option(None, "--parsed", parser=lambda v: v.upper()),
    ):
        pass

    cmd_ = typer.main.get_command(app)
    return cmd_, {p.name: p for p in cmd_.params}


def _outcome(fn):
    try:
        v = fn()
        return ("ok", type(v).__name__, v if not isinstance(v, (list, tuple)) else list(v))
    except Exception as e:  # noqa: BLE001 - the oracle compares errors too
        return ("error", type(e).__name__, str(getattr(e, "message", e)))


def test_the_fast_path_coerces_exactly_as_typer_does(tmp_path):
    from tools import typer_fastpath

    assert typer_fastpath.install()
    from typer import core

    original = core._TyperParameter.get_runtime_param._dsv4_original
    cmd, params = _cli_params()
    ctx = cmd.make_context("cmd", [], resilient_parsing=True)
    afile, adir = tmp_path / "f.txt", tmp_path / "d"
    afile.write_text("x")
    adir.mkdir()
    values = [None, "", "x", "a b", "a/", "a//b", "./x", "é", "-", "a\0b", b"bytes", 5, ("a", "b"), ["a"], [], (), "~",
              str(tmp_path / "missing"), str(afile), str(adir), str(tmp_path / "d" / ".." / "f.txt"), afile]
    seen_fast = set()
    for name, param in params.items():
        for v in values:
            want = _outcome(lambda: original(param).coerce(v, param=param, ctx=ctx))
            param.__dict__.pop("_dsv4_lean_param", None)
            got = _outcome(lambda: param.get_runtime_param().coerce(v, param=param, ctx=ctx))
            assert got == want, (name, v, got, want)
            seen_fast.add((name, param.get_runtime_param()._kind))
    kinds = dict(seen_fast)
    assert kinds["names"] == kinds["many"] == "list" and kinds["text"] == kinds["plain"] == "str"
    assert kinds["where"] == kinds["must"] == kinds["resolved"] == "path"
    assert kinds["count"] is None and kinds["parsed"] is None  # left to Typer


def test_every_parameter_of_apply_takes_the_fast_path():
    from tools import applypatch

    cmd = typer.main.get_command(applypatch.app).commands["apply"]
    from tools.typer_fastpath import _plain_kind

    kinds = {p.name: _plain_kind(p.type_descriptor) for p in cmd.params if p.type_descriptor.annotation is not bool}
    assert kinds and all(kinds.values()), kinds


def test_a_tree_with_a_local_commit_is_still_refused_on_the_lean_path(env):
    one_patch(env)
    probe(env, "apply", "demo")
    author_commit(env.out / "demo", {"src/b.txt": "mine\n"}, "my work")
    code, loaded, out = probe(env, "apply", "demo")
    assert code == 1 and "re-applying would lose HEAD moved" in out, out
    assert "pydantic" not in loaded and "dsv4_patch.bump" not in loaded, loaded  # (the patches are parsed: not a no-op)


def test_a_noop_is_seen_from_the_bytes_and_an_edit_is_still_parsed_and_refused(env):
    """The no-op compares the bytes; a changed patch is parsed again, so a bad one is refused as before."""
    from dsv4_patch.errors import PatchFormatError
    from dsv4_patch.stack import load_stack, unparsed_fingerprint

    one_patch(env)
    env.apply()
    assert unparsed_fingerprint(env.stack, None) == load_stack(env.stack).fingerprint(None)
    assert unparsed_fingerprint(env.stack, None, 0) == load_stack(env.stack).__class__(env.stack, [], []).fingerprint(None)
    assert env.apply().status == "noop"
    (name,) = [p.name for p in (env.root / "patches/demo").glob("*.patch")]
    f = env.root / "patches/demo" / name
    f.write_bytes(f.read_bytes().replace(b"+++ b/src/a.py", b"+++ b/../outside.py"))
    with pytest.raises(PatchFormatError, match="outside.py"):
        env.apply()
    f.unlink()
    assert unparsed_fingerprint(env.stack, None) is None  # missing: the full load names it
    with pytest.raises(PatchFormatError, match="listed in series but missing"):
        env.apply()


def test_run_all_gives_what_run_gives_and_fails_like_it(env):
    one_patch(env)
    g = Git(env.apply().tree)
    (g.path / "new.txt").write_text("x\n")
    calls = [("status", "--porcelain=v2", "--branch"), ("for-each-ref", "--format=%(refname) %(objectname)"),
             ("log", "--format=%H %s")]
    assert [(r.rc, r.out) for r in g.run_all(*calls)] == [(g.run(*c).rc, g.run(*c).out) for c in calls]
    from dsv4_patch.gitcmd import GitFailed

    with pytest.raises(GitFailed, match="rev-parse --verify no-such-ref"):
        g.run_all(calls[0], ("rev-parse", "--verify", "no-such-ref"), calls[1])

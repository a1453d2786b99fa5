"""Issue 11: bounded fuzzing of the patch parser, the series loader and apply.

Properties: every input ends in success or one Dsv4Error whose message is one line; apply writes
nothing outside its output and cache folders; a failed apply leaves the previous tree intact.
Seeded (derandomized) so a CI run is reproducible; DSV4_FUZZ_SCALE multiplies the budgets for a
longer campaign (the counts of the last one are in the engine notes).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from synth import Env, author_commit, git, numbered

from dsv4_patch.errors import Dsv4Error
from dsv4_patch.gitcmd import Git
from dsv4_patch.lint import lint_stack
from dsv4_patch.config import load_project
from dsv4_patch.patchfile import parse_patch_bytes
from dsv4_patch.series import read_series
from dsv4_patch.tree import build_tree, read_state

SCALE = int(os.environ.get("DSV4_FUZZ_SCALE", "1"))
COUNTS = {"inputs": 0, "ok": 0, "errors": 0}

SPECIAL = [b"", b"---", b"-- ", b"diff --git a/x b/x", b"diff --git a/../x b/../x", b"@@ -0,0 +0,0 @@",
           b"@@ -1 +1 @@", b"@@ -1,99 +1,99 @@", b"GIT binary patch", b"literal 5", b"delta 3", b"zcmV?d00001",
           b"Binary files a/x and b/x differ", b"rename from ../../outside.txt", b"rename to ../outside.txt",
           b"new file mode 120000", b"new file mode 100644", b"+../../..", b"+/etc",
           b"From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001",
           b"Subject: =?utf-8?b?!!?=", b"Subject: =?nosuch?q?x?=", b"From: =?utf-8?q?=ZZ?=", b"From:",
           b"Patch-Filename: ../x.patch", b"\\ No newline at end of file", b"\xff\xfe\xe9", b"\x00",
           b"index 0000000000000000000000000000000000000000..1111111111111111111111111111111111111111 100644",
           b"--- /dev/null", b"+++ b/../escape.txt", b"+++ /abs/escape.txt", b"deleted file mode 100644",
           b"copy from src/a.py", b"copy to ../copied.txt", b"old mode 100644", b"new mode 100755",
           b"similarity index 90%", b"\r", b"+x\r", b"Upstream-Status: Bogus", b"Regression-Test:"]

mutation = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 1 << 20), st.integers(0, 255)),
    st.tuples(st.just("delete"), st.integers(0, 1 << 20), st.integers(1, 3)),
    st.tuples(st.just("duplicate"), st.integers(0, 1 << 20), st.integers(1, 3)),
    st.tuples(st.just("insert"), st.integers(0, 1 << 20), st.sampled_from(SPECIAL)),
    st.tuples(st.just("replace"), st.integers(0, 1 << 20), st.sampled_from(SPECIAL)),
    st.tuples(st.just("noise"), st.integers(0, 1 << 20), st.binary(max_size=24)),
    st.tuples(st.just("truncate"), st.integers(0, 1 << 20), st.just(0)),
)


def mutate(raw: bytes, muts) -> bytes:
    lines = raw.split(b"\n")
    for kind, at, arg in muts:
        if kind == "flip":
            data = bytearray(b"\n".join(lines))
            if data:
                data[at % len(data)] = arg
            lines = bytes(data).split(b"\n")
        elif kind == "truncate":
            data = b"\n".join(lines)
            lines = data[: at % (len(data) + 1)].split(b"\n")
        else:
            i = at % (len(lines) + 1)
            if kind == "delete":
                del lines[i:i + arg]
            elif kind == "duplicate":
                lines[i:i] = lines[i:i + arg]
            elif kind == "insert":
                lines.insert(i, arg)
            elif kind in ("replace", "noise"):
                lines[i:i + 1] = [arg]
    return b"\n".join(lines)


def seed_patches() -> dict[str, bytes]:
    """Patches of every kind git carries, made through the real tool on a synthetic upstream."""
    with tempfile.TemporaryDirectory(prefix="dsv4-fuzz-seed-") as td:
        env = Env(Path(td))
        env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n"), "new/dir/c.txt": "c\n"}, "[DSV4] Text")
        env.author({"zz/blob.bin": bytes((i * 7) % 256 for i in range(300))}, "[DSV4] Blob")
        tree = env.apply().tree
        git(tree, "mv", "src/b.txt", "src/renamed.txt")
        os.symlink("a.py", tree / "src/link.py")
        os.chmod(tree / "src/a.py", 0o755)
        author_commit(tree, {"src/renamed.txt": numbered(30, "b").replace("b 9\n", "b nine\n")}, "[DSV4] Rename",
                      "Why.\n\nUpstream-Status: Pending\n")
        env.export()
        return {n: b for n, b in env.patch_bytes().items() if n != "series"}


SEEDS = None


def seeds() -> dict[str, bytes]:
    global SEEDS
    if SEEDS is None:
        SEEDS = seed_patches()
    return SEEDS


def outcome(fn, *args, **kw):
    """'ok' or 'error'; anything but a one-line Dsv4Error fails the property."""
    COUNTS["inputs"] += 1
    try:
        fn(*args, **kw)
    except Dsv4Error as e:
        line = e.one_line()
        assert "\n" not in line and "\r" not in line, repr(line)
        COUNTS["errors"] += 1
        return "error"
    COUNTS["ok"] += 1
    return "ok"


@settings(max_examples=300 * SCALE, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(st.data(), st.lists(mutation, min_size=1, max_size=4))
def test_fuzz_patch_parser(data, muts):
    name = data.draw(st.sampled_from(sorted(seeds())))
    outcome(parse_patch_bytes, mutate(seeds()[name], muts), name)


series_line = st.one_of(st.sampled_from([b"text.patch", b"blob.patch", b"# c", b"", b"../x.patch", b"a/b.patch",
                                         b".hidden.patch", b"series", b"x.txt", b"text.patch # c", b"  text.patch  "]),
                        st.binary(max_size=16))


@settings(max_examples=150 * SCALE, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(st.lists(series_line, max_size=6))
def test_fuzz_series_loader_and_check(lines):
    with tempfile.TemporaryDirectory(prefix="dsv4-fuzz-series-") as td:
        root = Path(td)
        (root / "patches" / "demo").mkdir(parents=True)
        (root / "patches" / "stacks.toml").write_text(
            '[stacks.demo]\nupstream = "https://example.invalid/demo"\ncommit = "0"\npatches = "demo"\n'
            '[[stacks.demo.sources]]\nkind = "path"\npath = "/nonexistent"\n')
        for n, b in seeds().items():
            (root / "patches" / "demo" / n).write_bytes(b)
        series = root / "patches" / "demo" / "series"
        series.write_bytes(b"\n".join(lines))
        outcome(read_series, series)
        project = load_project(root)
        for f in lint_stack(project, project.stack("demo")):  # check never raises; one line each
            assert "\n" not in str(f)


def snapshot(root: Path, skip: tuple[Path, ...]) -> dict[str, tuple]:
    """Every file's size and content hash (not mtime: a `git clone --local` of a path source shares
    object files by hard link, and git refreshes an existing object's mtime when it meets it again;
    the bytes never change)."""
    import hashlib

    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        d = Path(dirpath)
        dirnames[:] = [x for x in dirnames if d / x not in skip]
        for f in filenames:
            p = d / f
            data = os.readlink(p).encode() if p.is_symlink() else p.read_bytes()
            out[str(p)] = (len(data), hashlib.sha1(data).hexdigest())
    return out


APPLY = {}


def apply_env() -> Env:
    if "env" not in APPLY:
        td = tempfile.mkdtemp(prefix="dsv4-fuzz-apply-")
        env = Env(Path(td) / "w")
        env.root.joinpath("patches/demo").mkdir(parents=True, exist_ok=True)
        for n, b in seeds().items():
            (env.stack.patch_dir / n).write_bytes(b)
        env.stack.series_path.write_text("".join(f"{n}\n" for n in ("text.patch", "blob.patch", "rename.patch")))
        env.apply()
        APPLY.update(env=env, dir=td)
    return APPLY["env"]


@pytest.fixture(scope="module", autouse=True)
def _cleanup_apply_env():
    yield
    if "dir" in APPLY:
        shutil.rmtree(APPLY.pop("dir"), ignore_errors=True)
        APPLY.clear()


@settings(max_examples=10 * SCALE, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(st.sampled_from(["text.patch", "blob.patch", "rename.patch"]), st.lists(mutation, min_size=1, max_size=3))
def test_fuzz_apply_writes_only_its_folders_and_keeps_the_tree(name, muts):
    env = apply_env()
    patch = env.stack.patch_dir / name
    original = patch.read_bytes()
    tree = env.out / "demo"
    head, state = Git(tree).rev("HEAD"), read_state(tree)
    root = env.tmp.parent
    patch.write_bytes(mutate(original, muts))
    before = snapshot(root, (env.out, env.cache.root))
    try:
        result = outcome(build_tree, env.stack, env.out, cache=env.cache)
        after = snapshot(root, (env.out, env.cache.root))
    finally:
        patch.write_bytes(original)
    assert after == before, sorted(set(after.items()) ^ set(before.items()))[:5]
    if result == "error":
        assert Git(tree).rev("HEAD") == head and read_state(tree) == state
        assert Git(tree).out("status", "--porcelain") == ""


def test_fuzz_counts_are_reported(capsys):
    """Prints the counts of this run (inputs, successes, one-line errors); runs last in the file."""
    assert COUNTS["inputs"] > 0
    with capsys.disabled():
        print(f"\nfuzz: {COUNTS['inputs']} inputs, {COUNTS['ok']} ok, {COUNTS['errors']} one-line errors, 0 escapes")


FOUND = {  # inputs the fuzzer found crashing the parser (each was a traceback before its fix)
    "headerless mbox": b"From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n\nbody\n",
    "diff --git cut short": (b"From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
                             b"From: A <a@example.com>\nSubject: x\n\nWhy.\n---\ndiff --git "),
}


@pytest.mark.parametrize("kind", sorted(FOUND))
def test_inputs_the_fuzzer_found_are_one_line_errors(kind):
    with pytest.raises(Dsv4Error) as ei:
        parse_patch_bytes(FOUND[kind], "found.patch")
    assert "\n" not in ei.value.one_line() and "found.patch" in ei.value.one_line()

"""check: series/folder agreement, format, metadata, test ids, whitespace, path safety, synced files."""

from __future__ import annotations

from synth import numbered

from dsv4_patch.config import load_project
from dsv4_patch.lint import lint_stack, node_exists


def findings(env) -> list[str]:
    return [str(f) for f in lint_stack(load_project(env.root), env.stack)]


def add_test_file(env, body="def test_ok():\n    pass\n\nclass TestK:\n    def test_m(self):\n        pass\n"):
    (env.root / "tests").mkdir(exist_ok=True)
    (env.root / "tests/test_demo.py").write_text(body)


def one_patch(env, files=None, subject="[DSV4] Three", body=None):
    files = files or {"src/a.py": numbered(60).replace("line 3\n", "line three\n")}
    kw = {} if body is None else {"body": body}
    env.author(files, subject, **kw)
    return next((env.root / "patches/demo").glob("*.patch"))


def test_clean_stack_has_no_findings(env):
    add_test_file(env)
    one_patch(env)
    assert findings(env) == []


def test_series_and_folder_disagree(env):
    add_test_file(env)
    p = one_patch(env)
    (env.root / "patches/demo/orphan.patch").write_bytes(p.read_bytes())
    (env.root / "patches/demo/series").write_text(f"{p.name}\n{p.name}\nghost.patch\n")
    f = findings(env)
    assert any("orphan.patch: error: orphan patch" in x for x in f)
    assert any("series:2: error: duplicate entry three.patch (first on line 1)" in x for x in f)
    assert any("series:3: error: ghost.patch is listed but missing" in x for x in f)


def test_missing_metadata_and_description(env):
    add_test_file(env)
    one_patch(env, body="")
    f = "\n".join(findings(env))
    assert "no description" in f and "missing Upstream-Status" in f and "missing Regression-Test" in f


def test_bad_upstream_status_value(env):
    add_test_file(env)
    one_patch(env, body="Why.\n\nUpstream-Status: Maybe later\nRegression-Test: tests/test_demo.py::test_ok\n")
    assert any("bad Upstream-Status 'Maybe later'" in x for x in findings(env))


def test_regression_test_ids_must_exist(env):
    add_test_file(env)
    one_patch(env, body="Why.\n\nUpstream-Status: Pending\nRegression-Test: tests/test_demo.py::test_nope\n"
                        "Regression-Test: tests/nothere.py::test_x\n")
    f = "\n".join(findings(env))
    assert "tests/test_demo.py has no test_nope" in f and "no file tests/nothere.py" in f


def test_node_exists_handles_classes_and_parametrize(env):
    add_test_file(env)
    assert node_exists(env.root, "tests/test_demo.py::TestK::test_m") is None
    assert node_exists(env.root, "tests/test_demo.py::test_ok[case-1]") is None
    assert node_exists(env.root, "tests/test_demo.py::TestK::test_zz") is not None


def test_added_trailing_whitespace_is_reported_with_its_patch_line(env):
    add_test_file(env)
    p = one_patch(env, files={"src/a.py": numbered(60).replace("line 3\n", "line three   \n")})
    lineno = next(i for i, ln in enumerate(p.read_text().splitlines(), 1) if ln == "+line three   ")
    assert f"patches/demo/three.patch:{lineno}: error: added trailing whitespace in src/a.py (remove it and re-export)" in findings(env)


def test_crlf_lines_are_not_trailing_whitespace(env):
    add_test_file(env)
    crlf = "".join(f"row {i}\r\n" for i in range(9)).encode()
    env.up.write("w.txt", crlf)
    env.repin(env.up.commit("crlf"))
    one_patch(env, files={"w.txt": crlf.replace(b"row 4\r\n", b"row four\r\n")})
    assert findings(env) == []


def _rewrite(p, old: bytes, new: bytes):
    p.write_bytes(p.read_bytes().replace(old, new))


def test_path_safety(env):
    add_test_file(env)
    p = one_patch(env)
    for bad, why in ((b"/etc/passwd", "absolute path"), (b"../up.py", "path with '..'"), (b".git/config", "under .git/")):
        _rewrite(p, b"src/a.py", bad)
        assert any(why in x for x in findings(env)), bad
        _rewrite(p, bad, b"src/a.py")


def test_symlink_pointing_outside_is_reported(env):
    import os

    add_test_file(env)
    tree = env.apply().tree
    os.symlink("a.py", tree / "src/link")
    from synth import META, author_commit

    author_commit(tree, {}, "[DSV4] Link", "Why.\n\n" + META)
    from dsv4_patch.exporter import export_stack

    export_stack(env.stack, tree)  # export refuses a link out of the tree: the file is edited after it
    patch = env.stack.patch_dir / "link.patch"
    patch.write_bytes(patch.read_bytes().replace(b"\n+a.py\n", b"\n+../../../../etc/shadow\n", 1))
    assert any("symlink src/link -> ../../../../etc/shadow points outside the tree" in x for x in findings(env))


def test_synced_file_must_equal_its_source_of_truth(env):
    add_test_file(env)
    toml = env.root / "patches/stacks.toml"
    toml.write_text(toml.read_text() + '\n[stacks.demo.synced]\n"pkg/k.py" = "kernels_k.py"\n')
    (env.root / "kernels_k.py").write_text("X = 1\n")
    one_patch(env, files={"pkg/k.py": "X = 1\n"}, subject="[DSV4] Add k")
    assert findings(env) == []
    (env.root / "kernels_k.py").write_text("X = 2\n")
    assert any("pkg/k.py differs from kernels_k.py" in x for x in findings(env))


def test_node_exists_accepts_a_test_imported_by_name(env):
    add_test_file(env)
    (env.root / "tests/test_reexport.py").write_text("from test_demo import test_ok  # noqa: F401\n")
    assert node_exists(env.root, "tests/test_reexport.py::test_ok") is None
    assert node_exists(env.root, "tests/test_reexport.py::test_other") is not None

"""Issue 30 item 6: .gitignore covers what `build --venv .venv-vllm` leaves in the project root;
the conflict hint names the files with markers (and does not ask to resolve markers when none were
left); `export --check` fails when a release's tree is missing; `git am --continue` typed in the
stopped attempt is refused with the command that records the resolution."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from synth import Upstream, git, numbered

ROOT = Path(__file__).resolve().parents[2]
META = "Why.\n\nUpstream-Status: Pending\nRegression-Test: tests/test_demo.py::test_ok\nSigned-off-by: Pat Cher <pat@example.com>\n"


def test_gitignore_covers_the_vllm_venv_and_its_build_lock():
    for path in (".venv-vllm/bin/python", "..venv-vllm.lock"):
        p = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", "--no-index", path])
        assert p.returncode == 0, f"{path} is not ignored by .gitignore"
    p = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", "--no-index", "patches/vllm/series"])
    assert p.returncode == 1  # the patterns stay narrow


def _conflicting_stack(env, keep_old_tree: bool):
    """One patch on src/a.py; the pin moves to a release imported without history (as an sdist
    is), where line 3 changed. With the old tree gone, no repository has the patch's pre-image."""
    (env.root / "tests").mkdir(exist_ok=True)
    (env.root / "tests/test_demo.py").write_text("def test_ok():\n    pass\n")
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three", body=META)
    lonely = Upstream(env.tmp / "lonely")
    lonely.write("src/a.py", numbered(60).replace("line 3\n", "line 3 (upstream)\n"))
    lonely.write("src/b.txt", numbered(30, "b"))
    new = lonely.commit("release")
    toml = env.root / "patches/stacks.toml"
    toml.write_text(toml.read_text().replace(str(env.up.path), str(lonely.path)).replace(env.base, new))
    if not keep_old_tree:
        shutil.rmtree(env.out / "demo")


def test_conflict_hint_names_the_marked_files(env, cli):
    _conflicting_stack(env, keep_old_tree=True)
    p = cli(env, "apply", "demo", "--force", check=3)
    assert "resolve the conflict markers in src/a.py (in " in p.stderr, p.stderr


def test_no_markers_no_request_to_resolve_them(env, cli):
    _conflicting_stack(env, keep_old_tree=False)
    p = cli(env, "apply", "demo", check=3)
    failed = env.out / ".dsv4/failed/demo"
    assert "<<<<<<<" not in (failed / "src/a.py").read_text()
    assert "resolve the conflict markers" not in p.stderr, p.stderr
    assert "no conflict markers were left" in p.stderr and "am --show-current-patch=diff" in p.stderr
    assert "dsv4-patch apply demo --continue" in p.stderr


def test_git_am_continue_in_the_attempt_is_refused_and_apply_continue_records(env, cli):
    _conflicting_stack(env, keep_old_tree=True)
    cli(env, "apply", "demo", "--force", check=3)
    failed = env.out / ".dsv4/failed/demo"
    (failed / "src/a.py").write_text(numbered(60).replace("line 3\n", "line three (upstream)\n"))
    subprocess.run(["git", "add", "src/a.py"], cwd=failed, check=True)
    p = subprocess.run(["git", "am", "--continue"], cwd=failed, capture_output=True, text=True,
                       env={**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1",
                            "GIT_COMMITTER_NAME": "You", "GIT_COMMITTER_EMAIL": "you@example.com"})
    assert p.returncode != 0, p.stdout + p.stderr
    assert "dsv4-patch apply demo --continue" in p.stderr
    assert (failed / ".git/rebase-apply").is_dir()  # nothing committed behind the tool's back
    assert git(failed, "log", "-1", "--format=%s").strip() != "[DSV4] Three"

    p = cli(env, "apply", "demo", "--continue", check=0)
    assert "line three (upstream)" in (env.out / "demo/src/a.py").read_text()
    assert list((env.root / "patches/demo/resolutions").rglob("*.patch")), p.stdout  # remembered
    # the finished tree keeps no hook that would refuse the person's own `git am` later
    hook = env.out / "demo/.git/hooks/pre-applypatch"
    assert not hook.exists() or subprocess.run([str(hook)], cwd=env.out / "demo").returncode == 0


def _two_releases(env):
    from dsv4_patch.config import load_project

    (env.root / "tests").mkdir(exist_ok=True)
    (env.root / "tests/test_demo.py").write_text("def test_ok():\n    pass\n")
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three", body=META)
    env.up.write("src/c.txt", "new in v2\n")
    v2 = env.up.commit("v2")
    toml = env.root / "patches/stacks.toml"
    toml.write_text(toml.read_text() + f'\n[stacks.demo.releases."v2"]\ncommit = "{v2}"\n'
                    f'\n[[stacks.demo.releases."v2".sources]]\nkind = "path"\npath = "{env.up.path}"\n')
    (env.root / "patches/demo/releases/v2").mkdir(parents=True)
    (env.root / "patches/demo/releases/v2/series").write_text("# v2 series\n")
    assert [c.label for c in load_project(env.root).targets()] == ["demo", "demo@v2"]


def test_export_check_fails_when_a_release_tree_is_missing(env, cli):
    _two_releases(env)
    assert (env.out / "demo").is_dir() and not (env.out / "demo@v2").exists()
    p = cli(env, "export", "demo", "--check")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "demo@v2" in p.stdout + p.stderr and "dsv4-patch apply demo@v2" in p.stdout + p.stderr
    cli(env, "export", "demo", check=0)  # writing skips a release without a tree, as before
    cli(env, "apply", "demo@v2", check=0)
    cli(env, "export", "demo", "--check", check=0)


def test_gpu_tests_without_a_gpu_do_not_suggest_installing_torch(monkeypatch):
    """Without a GPU the vLLM GPU tests skip for the GPU: `pip install torch` would change nothing."""
    sys.path.insert(0, str(ROOT / "tests/regress/vllm"))
    try:
        import _cuda_torch
    finally:
        sys.path.remove(str(ROOT / "tests/regress/vllm"))
    import importlib.util

    monkeypatch.setattr(_cuda_torch, "_maybe_a_gpu", lambda: False)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)  # torch not installed
    torch, why = _cuda_torch.cuda_torch()
    assert torch is None and why == _cuda_torch.NEEDS_GPU and "pip install" not in why
    monkeypatch.setattr(_cuda_torch, "_maybe_a_gpu", lambda: True)  # a GPU: then torch is what is missing
    assert _cuda_torch.cuda_torch() == (None, _cuda_torch.NEEDS_TORCH)
    sglang = (ROOT / "tests/regress/sglang/test_o_fp8_qdq_gpu.py").read_text()
    assert 'reason="needs torch (pip install' not in sglang  # its reason names the GPU first

"""The real pins: vLLM 0.27.1 sdist and SGLang 0.5.23 wheel from PyPI (skipped, with the reason, where
PyPI cannot be reached). Downloads and imports are cached under ~/.cache/dsv4-patch."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import _check_cache as check_cache
import pytest

from dsv4_patch import api
from dsv4_patch.config import load_project
from dsv4_patch.gitcmd import Git
from dsv4_patch.sources import Cache, archive, materialize

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.network, pytest.mark.slow]


@pytest.fixture(scope="module")
def pypi():
    try:
        urllib.request.urlopen(f"{archive.index_url()}/vllm/", timeout=15).close()
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"PyPI index unreachable here ({e}); the real-archive tests need it")


@pytest.fixture(scope="module")
def project():
    return load_project(ROOT)


def only(cfg, kind):
    import copy

    c = copy.copy(cfg)
    c.sources = [s for s in cfg.sources if s.kind == kind]
    return c


def test_vllm_sdist_imports_verified_with_its_commit_id(pypi, project):
    cfg = only(project.stack("vllm"), "sdist")
    base = materialize(cfg, Cache.default())
    g = Git(base.git_dir)
    msg = g.out("log", "-1", "--format=%B", base.commit)
    assert "sha256: eec2d54d137ac1e59cb4c39226dfee1943eefc8f4788f5821d7300d6acbdb646" in msg
    assert "recorded-commit: 6e448d0ea" in msg
    files = g.out("ls-tree", "-r", "--name-only", base.commit).splitlines()
    assert len(files) > 6000 and "vllm/envs.py" in files and not any(f.startswith("vllm-0.27.1/") for f in files)
    # deterministic: the same archive always gives the same commit
    assert base.commit == materialize(cfg, Cache.default(), offline=True).commit


def test_vllm_sdist_with_a_wrong_pinned_commit_is_refused(pypi, project, tmp_path):
    import copy

    cfg = only(project.stack("vllm"), "sdist")
    bad = copy.copy(cfg)
    bad.commit = "0123456789"
    spec = cfg.sources[0]
    # a private cache, seeded with the verified archive, so the import really runs
    real, _ = archive.download("vllm", "vllm-0.27.1.tar.gz", spec.get("sha256"), Cache.default())
    cache = Cache(tmp_path / "cache")
    (cache.dir("archives") / real.name).symlink_to(real)
    with pytest.raises(Exception, match="built from commit 6e448d0ea, the pin says 0123456789"):
        archive.materialize(bad, spec, cache)
    assert not any((cache.root / "imports").iterdir())


def test_sglang_wheel_lands_under_python(pypi, project):
    base = materialize(only(project.stack("sglang"), "wheel"), Cache.default())
    files = Git(base.git_dir).out("ls-tree", "-r", "--name-only", base.commit).splitlines()
    assert "python/sglang/srt/models/deepseek_v4.py" in files and "python/sglang/srt/environ.py" in files
    assert all(f.startswith("python/sglang/") for f in files)


def test_vllm_cmake_deepgemm_pin_is_read_and_compared(pypi, project):
    base = materialize(only(project.stack("vllm"), "sdist"), Cache.default())
    repo, tag = api.vllm_deepgemm_pin(base.git_dir, base.commit)
    assert repo and "DeepGEMM" in repo and tag and tag.startswith("e21c821f")
    rows = api.status(project, ["vllm"])
    assert rows[0].info["vllm_deepgemm_pin"].endswith(tag)
    pin = project.stack("deepgemm").commit[:12]  # the deepgemm stack's pin is another DeepGEMM commit
    assert any("builds DeepGEMM e21c821f" in w and pin in w for w in rows[0].warnings)


def test_pin_dry_run_reverifies_the_same_release(pypi, project):
    res = api.pin(project, "vllm", "v0.27.1", source="sdist", dry_run=True)
    assert res.changes["sources.sdist.sha256"][1] == "eec2d54d137ac1e59cb4c39226dfee1943eefc8f4788f5821d7300d6acbdb646"
    assert res.changes["commit"] == ("6e448d0ea", "6e448d0ea")


def test_vllm_sdist_streams_to_the_tree_of_tar_x_and_git_add(pypi, project, tmp_path):
    """The streaming import of the real 0.27.1 sdist (into a private cache) has the tree id that
    `tar -x` + `git add -A` of the same archive gives: the recipe before streaming, and what the
    cached imports and build trees were made from."""
    import subprocess

    from synth import git

    cfg = only(project.stack("vllm"), "sdist")
    spec = cfg.sources[0]
    real, _ = archive.download("vllm", "vllm-0.27.1.tar.gz", spec.get("sha256"), Cache.default())
    cache = Cache(tmp_path / "cache")
    (cache.dir("archives") / real.name).symlink_to(real)
    base = archive.materialize(cfg, spec, cache)
    assert not any((cache.root / "tmp").iterdir())

    def oracle() -> dict:
        out = tmp_path / "oracle"
        out.mkdir()
        subprocess.run(["tar", "-xzf", str(real), "--no-same-owner", "-C", str(out)], check=True)
        env = {"GIT_DIR": str(tmp_path / "oracle.git"), "GIT_WORK_TREE": str(out / "vllm-0.27.1")}
        git(tmp_path, "init", "-q", "--bare", str(tmp_path / "oracle.git"))
        git(out, "add", "-A", "--force", ".", env=env)
        return {"tree": git(out, "write-tree", env=env).strip()}

    # The oracle's answer depends only on the archive's bytes, tar, git and this recipe: kept in the
    # check-result cache (tests/_check_cache.py) under those, it is extracted once, not every run.
    versions = [subprocess.run([tool, "--version"], capture_output=True, text=True).stdout for tool in ("tar", "git")]
    key = check_cache.key_of("tar -x + git add -A", spec.get("sha256"), versions,
                             check_cache.sources_digest(ROOT, (Path(__file__),)))
    want = check_cache.memoized(key, "vllm-0.27.1.tar.gz: the tree of tar -x + git add -A", oracle)["tree"]
    assert Git(base.git_dir).out("rev-parse", f"{base.commit}^{{tree}}") == want

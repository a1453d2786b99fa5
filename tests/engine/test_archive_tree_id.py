"""An archive source's content id (`tree`): the git tree id of the imported tree, checked at every
import. Two archives may carry different trees under one version label (vLLM 0.33.0 and 0.34.0 both
vendor a DeepGEMM "2.8.1"); the pin names the tree it means, and `pin` moves the id with the archive."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

from dsv4_patch.config import SourceSpec, StackConfig, load_project
from dsv4_patch.errors import SourceError
from dsv4_patch.gitcmd import Git
from dsv4_patch.pinning import release_pin
from dsv4_patch.sources import Cache, archive


def _stack(tmp: Path) -> StackConfig:
    return StackConfig("demo", "https://example.invalid/demo", None, "v1.0", None, tmp / "patches/demo", [])


def _wheel(tmp: Path, version: str, label_file: str) -> tuple[Path, str]:
    """A wheel vendoring `vendor/lib/` whose version label is the same in every build (like 2.8.1)."""
    whl = tmp / f"host-{version}-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as zf:
        zf.writestr("host/vendor/lib/__init__.py", "__version__ = '2.8.1'\n")
        zf.writestr("host/vendor/lib/kernel.cuh", label_file)
        zf.writestr("host/other.py", "X = 1\n")
    return whl, hashlib.sha256(whl.read_bytes()).hexdigest()


def _spec(whl: Path, sha: str, version: str, tree: str | None) -> SourceSpec:
    opts = {"package": "host", "version": version, "sha256": sha, "filename": whl.name,
            "include": ["host/vendor/lib/*"], "reroot": {"host/vendor/lib/": "lib/"}}
    if tree:
        opts["tree"] = tree
    return SourceSpec("wheel", opts)


def _seed(cache: Cache, whl: Path) -> None:
    (cache.dir("archives") / whl.name).write_bytes(whl.read_bytes())


def test_the_content_id_tells_two_trees_under_one_label_apart(tmp_path):
    cache = Cache(tmp_path / "cache")
    a, sha_a = _wheel(tmp_path, "1.0", "// tree A\n")
    b, sha_b = _wheel(tmp_path, "2.0", "// tree B\n")
    _seed(cache, a)
    _seed(cache, b)
    base_a = archive.materialize(_stack(tmp_path), _spec(a, sha_a, "1.0", None), cache)
    base_b = archive.materialize(_stack(tmp_path), _spec(b, sha_b, "2.0", None), cache)
    tree_a, tree_b = archive.tree_id(base_a), archive.tree_id(base_b)
    assert tree_a != tree_b  # same __version__, other content
    assert tree_a == Git(base_a.git_dir).out("rev-parse", f"{base_a.commit}^{{tree}}").strip()
    # the right id passes; the other tree's id is refused in one line naming both ids
    assert archive.materialize(_stack(tmp_path), _spec(a, sha_a, "1.0", tree_a), cache).commit == base_a.commit
    with pytest.raises(SourceError) as e:
        archive.materialize(_stack(tmp_path), _spec(b, sha_b, "2.0", tree_a), cache)
    assert e.value.one_line().count("\n") == 0
    assert f"the imported tree is {tree_b}" in str(e.value) and tree_a in str(e.value)


def test_a_wrong_content_id_is_refused_on_a_fresh_import_and_nothing_is_cached(tmp_path):
    cache = Cache(tmp_path / "cache")
    a, sha_a = _wheel(tmp_path, "1.0", "// tree A\n")
    _seed(cache, a)
    with pytest.raises(SourceError, match="content id"):
        archive.materialize(_stack(tmp_path), _spec(a, sha_a, "1.0", "0" * 40), cache)
    assert not any((cache.root / "imports").glob("*.git"))


def test_pin_records_the_new_content_id(tmp_path):
    cache = Cache(tmp_path / "cache")
    a, sha_a = _wheel(tmp_path, "1.0", "// tree A\n")
    b, _ = _wheel(tmp_path, "2.0", "// tree B\n")
    _seed(cache, a)
    _seed(cache, b)
    base_a = archive.materialize(_stack(tmp_path), _spec(a, sha_a, "1.0", None), cache)
    base_b, src, _ = release_pin(_stack(tmp_path), _spec(a, sha_a, "1.0", archive.tree_id(base_a)), "2.0", cache)
    assert src["tree"] == archive.tree_id(base_b) != archive.tree_id(base_a)


def test_the_deepgemm_pin_and_its_target_name_different_trees():
    """patches/stacks.toml: the deepgemm pin (vLLM 0.34.0's vendored 2.8.1) and the vllm-0.33.0 target
    (0.33.0's vendored 2.8.1) carry content ids, and they differ."""
    dg = load_project(Path(__file__).resolve().parents[2]).stack("deepgemm")
    wheel = next(s for s in dg.sources if s.kind == "wheel")
    targets = {t["ref"]: t for t in dg.raw.get("targets", [])}
    assert wheel.get("tree") and targets["vllm-0.33.0"]["tree"]
    assert wheel.get("tree") != targets["vllm-0.33.0"]["tree"]
    assert "labelled 2.8.1" in wheel.get("what")

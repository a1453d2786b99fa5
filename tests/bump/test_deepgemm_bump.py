"""The DeepGEMM stack on the trees users run, for real, from PyPI, and the docs agreeing with it.

The pin is vLLM's vendored DeepGEMM build labelled 2.8.1, from the vLLM 0.34.0 wheel; the vLLM 0.33.0
wheel vendors another tree under the same label (the `vllm-0.33.0` bump target). Both are checked by
their content id (`tree`) at import. No GitHub anywhere:
- the pin itself: `apply deepgemm` builds it from the wheel (the git source is never tried), and it
  carries both NVFP4 MegaMoE kernels;
- the stack as it is (no patches) bumped onto the 0.33.0 tree: imported and recorded, nothing to carry,
  nothing written;
- the stack as it was at HISTORICAL (the last commit carrying the two NVFP4 patches, pinned to the
  retired 54e2261), rebuilt from git history into a scratch project with its own stacks.toml and the
  tests it carried, bumped onto its `2.8.1` target (the 0.33.0 tree): its verdicts must equal the
  docs/bumps page's table. Skips, with the reason, in a clone without that history (a shallow checkout);
  54e2261 itself is used where DSV4_DEEPGEMM_GIT_MIRROR reaches it, and the bump carries on without it;
- synthetic patches against the 0.33.0 tree: one wholly outside the partial tree (`outside`), one whose
  intent test already passes there (`fixed-upstream`), one whose intent test fails there (`needed`).

Skips, with the reason, only when a wheel cannot be had (no index and no archive cache)."""

from __future__ import annotations

import hashlib
import io
import re
import tarfile
from pathlib import Path

import pytest

from dsv4_patch.bump import BumpOptions, bump
from dsv4_patch.bump.report import bump_markdown
from dsv4_patch.config import load_project
from dsv4_patch.errors import SourceError
from dsv4_patch.gitcmd import Git

pytestmark = [pytest.mark.network, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "bumps" / "deepgemm-54e2261-to-2.8.1.md"
ROW = re.compile(r"^\| `([^`]+\.patch)` \| (\w[\w-]*) \| ([^|]*) \| ([\w-]+) \|", re.M)
# the last commit whose patches/deepgemm carried the two NVFP4 patches (docs/patches/deepgemm-nvfp4.md)
HISTORICAL = "a926e982d736f8a968c03f42fd292b39c05a7fea"
# what a scratch project needs of it: the stack, the tests its patches bind, the oracle those tests import
HISTORICAL_PATHS = ("patches/stacks.toml", "patches/deepgemm", "tests/conftest.py", "tests/regress/deepgemm",
                    "kernels/__init__.py", "kernels/nvfp4", "pyproject.toml")


def _doc_rows() -> dict[str, tuple[str, list[str], str]]:
    text = DOC.read_text()
    table = text.split("<!-- verdicts -->", 2)[1]
    return {m[0]: (m[1], re.findall(r"`([^`]+)`", m[2]), m[3]) for m in ROW.findall(table)}


# the compile probe's skips (the historical tests/regress/deepgemm/_cuda_tools.py): no verdict without CUDA tools
TOOL_SKIPS = ("nvcc not found", "cuobjdump not found", "nvdisasm not found", "CUTLASS headers unavailable")


TARGET = "vllm-0.33.0"  # the current stack's bump target: vLLM 0.33.0's vendored tree
HISTORICAL_TARGET = "2.8.1"  # the same tree, as HISTORICAL's stacks.toml named it


def _bump(project_root: Path, out: Path, ref: str = TARGET):
    try:
        return bump(load_project(project_root), "deepgemm", ref, opts=BumpOptions(regress=False, out=out))
    except SourceError as e:
        pytest.skip(f"DeepGEMM as vendored in the vLLM 0.33.0 wheel unreachable here: {e.one_line()}")


# ------------------------------------------------------------------ the pin: vLLM 0.34.0's vendored tree
@pytest.fixture(scope="module")
def pinned(dsv4_tree):
    """The pin as `dsv4-patch apply deepgemm` builds it (through the `dsv4_tree` fixture: it skips only
    when no source is reachable, and fails on a refused archive: a sha256 or content-id mismatch)."""
    cfg = load_project(ROOT).stack("deepgemm")
    assert cfg.sources[0].kind == "wheel" and cfg.sources[0].get("tree"), \
        "the deepgemm pin's first source must be the vLLM wheel with a content id: CI builds it without GitHub"
    return cfg, None, dsv4_tree("deepgemm", patched=False)


def test_apply_builds_the_pin_from_the_wheel_without_github(pinned):
    cfg, res, tree = pinned
    wheel = next(s for s in cfg.sources if s.kind == "wheel")
    base = Git(tree).out("rev-parse", "HEAD^{tree}").strip()  # 0 patches: the tree is the import's
    assert base == wheel.get("tree")
    assert "__version__ = '2.8.1'" in (tree / "deep_gemm/__init__.py").read_text()
    assert not (tree / "csrc").exists() and not list(tree.rglob("*.so"))


def test_the_pin_carries_both_nvfp4_mega_moe_kernels_on_block16(pinned):
    _, _, tree = pinned
    impls = tree / "deep_gemm/include/deep_gemm/impls"
    assert (impls / "sm100_fp4_fp4_mega_moe.cuh").is_file() and (impls / "sm100_nvfp4_mega_moe.cuh").is_file()
    assert "kind::mxf4nvf4.block_scale.block16" in (tree / "deep_gemm/include/deep_gemm/ptx/nvfp4.cuh").read_text()
    mega = (tree / "deep_gemm/mega/__init__.py").read_text()
    assert "def fp4_fp4_mega_moe" in mega
    assert "def nvfp4_mega_moe" in (tree / "deep_gemm/mega/nvfp4.py").read_text()


def test_docs_name_the_pin_and_the_retired_54e2261(pinned):
    cfg, _, _ = pinned
    wheel = next(s for s in cfg.sources if s.kind == "wheel")
    page = (ROOT / "docs/patches/deepgemm-nvfp4.md").read_text()
    for needle in (wheel.get("sha256"), wheel.get("filename"), wheel.get("tree"), cfg.commit, "54e2261"):
        assert needle in page, needle


# ------------------------------------------------------------------ the stack as it is: no patches
@pytest.fixture(scope="module")
def report(tmp_path_factory):
    return _bump(ROOT, tmp_path_factory.mktemp("dgbump"))


def test_empty_stack_reports_the_tree_and_nothing_to_carry(report):
    assert report.outcomes == [] and report.semantic == []
    assert report.status == "partial" and report.exit_code == 3  # a partial tree: never exported or pinned
    assert report.new["partial"] == ["deep_gemm/", "third-party/cutlass/include/"]
    md = bump_markdown(report)
    assert "0 patches in series" in md and "range-diff failed" not in md


def test_the_imported_tree_is_deepgemm_2_8_1_with_nvfp4(report):
    tree = Path(report.tree)
    assert "__version__ = '2.8.1'" in (tree / "deep_gemm/__init__.py").read_text()
    # what the page says 2.8.1 provides: the NVFP4 MegaMoE kernel and the block16 MMA spelling
    assert (tree / "deep_gemm/include/deep_gemm/impls/sm100_nvfp4_mega_moe.cuh").is_file()
    assert "kind::mxf4nvf4.block_scale.block16" in (tree / "deep_gemm/include/deep_gemm/ptx/nvfp4.cuh").read_text()
    assert not (tree / "csrc").exists()


def test_docs_record_the_tree(report):
    text = DOC.read_text()
    cfg = next(t for t in load_project(ROOT).stack("deepgemm").raw["targets"] if t["ref"] == TARGET)
    assert cfg["sha256"] in text and cfg["filename"] in text and cfg["tree"] in text
    assert Git(Path(report.tree)).out("rev-parse", "HEAD^{tree}").strip() == cfg["tree"]
    assert report.new["commit"] in text  # the import commit is deterministic: same wheel, same commit
    assert HISTORICAL[:7] in text


def test_nothing_written(report):
    assert report.written_to is None and report.pin == {}


# ------------------------------------------------------------------ the stack as it was at HISTORICAL
@pytest.fixture(scope="module")
def historical(tmp_path_factory):
    git = Git(ROOT)
    if git.run("cat-file", "-e", f"{HISTORICAL}^{{commit}}", check=False).rc != 0:
        pytest.skip(f"commit {HISTORICAL[:12]} (the stack with its two patches) is not in this clone's history")
    proj = tmp_path_factory.mktemp("dg-historical")
    tarfile.open(fileobj=io.BytesIO(git.raw("archive", HISTORICAL, *HISTORICAL_PATHS))).extractall(proj)
    return _bump(proj, proj / "build", HISTORICAL_TARGET)


def test_historical_stack_report_and_docs_agree(historical):
    rows = _doc_rows()
    assert [o.patch for o in historical.outcomes] == list(rows), "the docs table lists other patches than the stack"
    for o in historical.outcomes:
        status, outside, semantic = rows[o.patch]
        assert o.status == status, o.patch
        assert o.outside == outside, o.patch
        got = historical.verdict(o.patch)
        if got.verdict == "untestable" and any(t in got.reason for t in TOOL_SKIPS):
            assert semantic == "fixed-upstream", o.patch  # only the compile probe needs those tools
            continue  # the compile probe needs CUDA tools this machine lacks: no verdict, and it says so
        assert got.verdict == semantic, (o.patch, got.reason)
    assert historical.status == "conflicts" and historical.exit_code == 3


def test_historical_markdown_report_rows_match_the_docs(historical):
    """The report a person reads (build/deepgemm.bump-report.md) says what the docs page says."""
    md = bump_markdown(historical)
    header = next(ln for ln in md.splitlines() if ln.startswith("| # | patch |"))
    col = {c.strip(): i for i, c in enumerate(header.strip("|").split("|"))}  # by name: columns get added
    for name, (status, outside, semantic) in _doc_rows().items():
        row = next(ln for ln in md.splitlines() if f"| `{name}` |" in ln)
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[col["result"]] == status
        assert cells[col["semantic"]] in (semantic, "untestable")  # untestable only without the CUDA tools
        assert all(f"`{f}`" in cells[col["detail"]] for f in outside)


# ------------------------------------------------------------------ synthetic patches, real 2.8.1 tree
INTENT_TESTS = '''
import os
from pathlib import Path

def tree():
    return Path(os.environ["DSV4_TREE_DEEPGEMM"])

def test_headers_issue_the_nvfp4_mma_on_block16():
    hits = [h for h in (tree() / "deep_gemm/include").rglob("*.cuh")
            if "kind::mxf4nvf4.block_scale.block16" in h.read_text(errors="replace")]
    assert hits, "no header issues tcgen05.mma kind::mxf4nvf4 .block16"

def test_host_api_transforms_ue4m3_block16():
    assert "kFloat8_e4m3fn and gran_k == 16" in (tree() / "csrc/apis/layout.hpp").read_text()

def test_facade_exports_a_ue4m3_mn_major_packing():
    assert "get_mn_major_tma_aligned_packed_ue4m3" in (tree() / "deep_gemm/_C.py").read_text()
'''


def _new_file_patch(path: str, subject: str, regression_test: str) -> str:
    """A patch adding a one-line file, as `git format-patch` writes it (the blob id is git's)."""
    body = b"synthetic\n"
    blob = hashlib.sha1(b"blob %d\0" % len(body) + body).hexdigest()[:7]
    return (f"From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
            f"From: Pat Cher <pat@example.com>\nDate: Sun, 1 Feb 2026 00:00:00 +0000\nSubject: [PATCH] {subject}\n\n"
            f"Why: a synthetic patch for the bump test.\n\nUpstream-Status: Pending\n"
            f"Regression-Test: {regression_test}\nSigned-off-by: Pat Cher <pat@example.com>\n---\n"
            f" {path} | 1 +\n 1 file changed, 1 insertion(+)\n create mode 100644 {path}\n\n"
            f"diff --git a/{path} b/{path}\nnew file mode 100644\nindex 0000000..{blob}\n--- /dev/null\n"
            f"+++ b/{path}\n@@ -0,0 +1 @@\n+synthetic\n-- \n2.43.0\n\n")


def _deepgemm_tables(toml: str) -> str:
    """patches/stacks.toml's deepgemm tables only (the scratch project has no other stack)."""
    keep, out = False, []
    for line in toml.splitlines():
        if line.startswith("["):
            keep = re.match(r"\[\[?stacks\.deepgemm[\].]", line) is not None
        if keep:
            out.append(line)
    return "\n".join(out) + "\n"


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    proj = tmp_path_factory.mktemp("dg-synthetic")
    (proj / "patches/deepgemm").mkdir(parents=True)
    (proj / "patches/stacks.toml").write_text(_deepgemm_tables((ROOT / "patches/stacks.toml").read_text()))
    (proj / "tests").mkdir()
    (proj / "tests/test_dg_intent.py").write_text(INTENT_TESTS)
    intent = "tests/test_dg_intent.py::"
    patches = {
        "host-only.patch": ("csrc/dsv4_synthetic.hpp", "Host only", intent + "test_host_api_transforms_ue4m3_block16"),
        "mma.patch": ("deep_gemm/dsv4_mma.txt", "MMA", intent + "test_headers_issue_the_nvfp4_mma_on_block16"),
        "layout.patch": ("deep_gemm/dsv4_layout.txt", "Layout", intent + "test_facade_exports_a_ue4m3_mn_major_packing"),
    }
    for name, args in patches.items():
        (proj / "patches/deepgemm" / name).write_text(_new_file_patch(*args))
    (proj / "patches/deepgemm/series").write_text("\n".join(patches) + "\n")
    return _bump(proj, proj / "build")


def test_synthetic_patches_get_outside_fixed_upstream_and_needed(synthetic):
    status = {o.patch: o.status for o in synthetic.outcomes}
    assert status["host-only.patch"] == "outside"     # csrc/ is not in the partial tree: not a conflict
    assert status["mma.patch"] == status["layout.patch"] == "clean"
    verdict = {p: synthetic.verdict(p).verdict for p in status}
    assert verdict["mma.patch"] == "fixed-upstream"   # 2.8.1's ptx/nvfp4.cuh issues .block16
    assert verdict["layout.patch"] == "needed"        # 2.8.1 packs UE4M3 its own way, no MN-major helper
    assert verdict["host-only.patch"] == "outside"     # its test reads csrc/: this tree cannot say, never "fixed"
    md = bump_markdown(synthetic)
    assert "## Proposed for removal" in md and "`mma.patch`" in md.split("## Proposed for removal")[1]
    assert synthetic.written_to is None and synthetic.exit_code == 3

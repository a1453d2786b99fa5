"""Repository rules that a clean clone would otherwise only reveal in CI."""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def tracked(*patterns: str) -> list[str]:
    out = subprocess.run(["git", "ls-files", *patterns], cwd=ROOT, capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_test_modules_have_unique_basenames():
    # Without __init__.py files pytest imports test modules by basename: two test_x.py in
    # different folders make collection fail ("import file mismatch") in a fresh checkout.
    names = Counter(Path(p).name for p in tracked("tests/**/test_*.py", "tests/test_*.py"))
    assert not [n for n, c in names.items() if c > 1]


def test_no_upstream_trees_committed_outside_patches():
    # The one hard rule: upstream code reaches this repo only inside patch files.
    upstream_like = ("vllm/v1/", "vllm/model_executor/", "sglang/srt/", "deep_gemm/include/", "csrc/jit/")
    offenders = [p for p in tracked() if not p.startswith("patches/") and any(u in p for u in upstream_like)]
    assert offenders == []


def test_git_runs_only_through_gitcmd():
    # Every git call gets the environment gitcmd builds (no GIT_DIR/GIT_INDEX_FILE/config leaking in):
    # no other engine or CLI module starts a `git` process itself.
    import re

    launch = re.compile(r"""\[\s*["']git["']\s*,""")  # an argv list starting with "git"
    offenders = [p for p in tracked("dsv4_patch/**.py", "dsv4_patch/*.py", "tools/*.py")
                 if p != "dsv4_patch/gitcmd.py" and launch.search((ROOT / p).read_text())]
    assert offenders == []


def test_no_citations_of_documents_outside_the_repository():
    # Docs and code never cite a document the project does not contain (the spec, the field reports
    # and their section numbers): they say what was learned, or point to docs/background.md.
    # Patch files are excluded (format-patch output, checked byte for byte). No pattern below
    # matches its own source text, so this file needs no exception.
    import re

    outside = re.compile("|".join([
        r"\bSPEC\s*(?:§|section|\.md)",   # the spec, by section number or by file name
        r"\bseed(?:'s)?\s+(?:report|§)",  # a field report, by name or by section number
        r"\breport\s+§",
        r"§\s*\d",                        # a bare section number: no doc here numbers its sections
        r"shared/seeds?/|\.\./shared/",   # the folder outside the repository that holds them
        r"\w-(?:report|notes|pr)\.txt\b", # the field reports' file names
    ]), re.IGNORECASE)
    offenders = []
    for p in tracked():
        if p.startswith("patches/"):
            continue
        try:
            text = (ROOT / p).read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue  # binary files, and files deleted but not yet staged
        offenders += [f"{p}:{n}: {line.strip()}" for n, line in enumerate(text.splitlines(), 1)
                      if outside.search(line)]
    assert offenders == [], "\n".join(offenders)

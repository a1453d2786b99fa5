"""Item 10: a backwards walk range says so; `e2e --model` names a missing checkpoint directory; a
tree is labelled with where its commit really came from; results READMEs and result files say what
is true of the files beside them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from synth import numbered

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "applypatch.py"  # not from conftest: several conftest modules share that name


def _git_sourced(env):
    toml = env.root / "patches/stacks.toml"
    toml.write_text(toml.read_text().replace('kind = "path"\npath = ', 'kind = "git"\nurl = '))


def test_backwards_walk_range_says_backwards(env, cli):
    _git_sourced(env)
    env.up.write("src/b.txt", numbered(30, "b").replace("b 9\n", "b nine\n"))
    newer = env.up.commit("newer")
    p = cli(env, "bump", "demo", "--walk", f"{newer}..{env.base}", check=2)
    assert "backwards" in p.stderr and f"--walk {env.base}..{newer}" in p.stderr


def test_e2e_names_a_missing_model_directory(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "DSV4_E2E_WORKER"}
    p = subprocess.run([sys.executable, str(TOOL), "e2e", "--model", str(tmp_path / "nonexistent"),
                        "--out", str(tmp_path / "out")], capture_output=True, text=True, env=env)
    assert p.returncode == 2
    assert "no such directory" in p.stderr and "nonexistent" in p.stderr and "torch" not in p.stderr


def test_a_bogus_mirror_is_not_credited_with_a_cached_commit(env, cli):
    _git_sourced(env)
    cli(env, "apply", "demo", check=0)  # fetched once: the commit is in the private cache's mirror
    import shutil

    shutil.rmtree(env.out / "demo")
    p = cli(env, "apply", "demo", "--json", check=0, extra_env={"DSV4_GIT_MIRROR_DEMO": "/nonexistent/demo.git"})
    (row,) = json.loads(p.stdout)
    assert "/nonexistent" not in row["source"]
    assert row["source"].startswith("git:" + str(env.cache.root))
    assert "not contacted" in row["note"]


def test_results_readmes_do_not_deny_the_results_beside_them():
    for readme in sorted(ROOT.glob("patches/*/results/README.md")):
        has_results = any(readme.parent.glob("*.json"))
        if has_results:
            assert "No result has been recorded" not in readme.read_text(), readme


def test_paths_cited_in_result_files_exist():
    """A result names the tests and files it rests on; a renamed file must not leave it pointing nowhere."""
    cited = re.compile(r"\b((?:tests|kernels|benchmarks|docs)/[\w./-]+\.(?:py|json|md))")
    for f in sorted(ROOT.glob("patches/**/results/*.json")):
        text = json.dumps(json.loads(f.read_text()).get("evidence", {}))
        for rel in cited.findall(text):
            assert (ROOT / rel).exists(), f"{f.relative_to(ROOT)} cites {rel}, which does not exist"

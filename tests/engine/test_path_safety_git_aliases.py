"""check refuses a patch that writes into a .git folder anywhere in the tree, under any name the file
systems we run on resolve to it (issue 29 item 5: `.git` was tested only as the first component, and
`.GIT`, `.git.`, `.git ` -- the same folder on case-insensitive or Windows file systems, as the archive
import already refuses them -- passed check)."""

from __future__ import annotations

import pytest
from test_lint import _rewrite, add_test_file, findings, one_patch

from dsv4_patch.lint import unsafe_path


@pytest.mark.parametrize("path", [".git/config", "sub/.git/hooks/post-checkout", "a/b/.git/config",
                                  ".GIT/config", "sub/.Git/hooks/x", ".git./config", ".git /config",
                                  "sub/.git../hooks/x", "sub/.git. ./x"])
def test_every_git_folder_alias_is_refused(path):
    assert unsafe_path(path) == "path under .git/", path


@pytest.mark.parametrize("path", ["src/.gitignore", ".github/workflows/ci.yml", "sub/.gitattributes",
                                  "docs/git/x.md", "a.git/x", "..git/x", ".git-blame-ignore-revs", "sub/git"])
def test_names_that_only_look_like_git_are_not(path):
    assert unsafe_path(path) is None, path


def test_check_refuses_a_patch_into_a_nested_git_folder(env):
    add_test_file(env)
    p = one_patch(env)
    for bad in (b"sub/.git/hooks/x", b".git./config", b"vendor/.GIT/config"):
        _rewrite(p, b"src/a.py", bad)
        assert any("under .git/" in x and bad.decode() in x for x in findings(env)), bad
        _rewrite(p, bad, b"src/a.py")
    assert findings(env) == []


def test_check_and_the_archive_import_share_one_rule():
    from dsv4_patch.lint import is_dot_git
    from dsv4_patch.sources.members import is_dot_git as archive_rule

    names = [".git", ".GIT", ".git.", ".git ", ".git. .", ".gitx", "git", "..git", ".git-x", ".Git..", "a.git", ""]
    assert [is_dot_git(n) for n in names] == [archive_rule(n) for n in names]

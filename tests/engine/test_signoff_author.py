"""`check`: the patch's author must be among its Signed-off-by identities (DCO checks, vLLM's
among them, want the author's own sign-off, not only a sign-off by someone)."""

from __future__ import annotations

from synth import git, numbered
from test_upstream_export import SOB, add_test_file, findings

META_NO_SOB = "Upstream-Status: Pending\nRegression-Test: tests/test_demo.py::test_ok\n"


def _amend(env, author: str, trailers: str) -> list:
    env.rebuild(force=True)
    tree = env.out / "demo"
    git(tree, "commit", "-q", "--amend", "--author", author, "-m", "[DSV4] Three\n\nWhy.\n\n" + META_NO_SOB + trailers)
    env.export()
    return findings(env)


def test_author_must_match_a_signed_off_by(env):
    add_test_file(env)
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three")
    assert findings(env) == []  # author Pat Cher, signed off by Pat Cher

    got = _amend(env, "Someone Else <else@example.com>", SOB + "\n")
    assert len(got) == 1 and got[0][0] == "patches/demo/three.patch", got
    assert "the author 'Someone Else <else@example.com>' has not signed off" in got[0][1]
    assert "reset-author" in got[0][1]

    # same name, other address: still not the author's sign-off
    got = _amend(env, "Pat Cher <pat@elsewhere.example.com>", SOB + "\n")
    assert len(got) == 1 and "has not signed off" in got[0][1], got

    # the email compares without case; a co-signer besides the author is fine
    assert _amend(env, "Pat Cher <PAT@Example.com>", SOB + "\n") == []
    assert _amend(env, "Ann Other <ann@example.com>",
                  SOB + "\nSigned-off-by: Ann Other <ann@example.com>\n") == []

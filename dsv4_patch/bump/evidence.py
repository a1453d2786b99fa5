"""No green without evidence: which carried patches a bump actually verified.

A bump whose every patch found a place is textually `ok`; that alone says nothing about whether the
patches still work, or are still needed, on the new upstream. A carried patch is *verified* only
when both of its checks ran and gave evidence:

    regression   its bound tests (Regression-Test) ran on the rebased tree and passed: regress's
                 outcome `passed`, or `partial` (some passed, none failed, the rest skipped with a
                 reason: the GPU tests of a CPU run)
    intent       its intent tests ran on the pristine new upstream and failed by assertion:
                 semantic verdict `needed` (upstream still lacks the behaviour)

Everything else is *unverified*, with the reason, per patch: regress `not-verified` (every bound
test skipped), `no-tests`, no result at all; semantic `untestable`, `no-intent`, `probe-error`,
`unimportable`, `outside`, `timeout`; a check not run (--no-regress, --no-semantic). A bump with one
unverified patch has the result `unverified` (EXIT_UNVERIFIED), never `ok`: its patches are
written and its pin moved as for `ok` (the rebase itself succeeded), but nothing claims they work.
A failed or missing regression test stays a failure (exit 1), worse than unverified.
"""

from __future__ import annotations

from ..errors import EXIT_UNVERIFIED  # noqa: F401  (re-exported: the code bump/pin/status/CI use)

REGRESS_EVIDENCE = ("passed", "partial")  # regress outcomes that verify a patch
INTENT_EVIDENCE = ("needed",)  # semantic verdicts that verify a carried patch


def unverified(carried: list[str], semantic, regress: dict | None, *, regress_asked: bool = True) -> dict[str, list[str]]:
    """patch -> why it is not verified, for each patch in `carried` (the refreshed series) that lacks
    evidence. `semantic`: the Semantic verdicts (None: not run); `regress`: the regress report as a
    dict (None: not run)."""
    verdicts = {s.patch: s for s in semantic or []}
    rows = {r["patch"]: r for r in (regress or {}).get("patches", [])}
    out: dict[str, list[str]] = {}
    for name in carried:
        why = []
        if semantic is None:
            why.append("intent tests not run (--no-semantic)")
        else:
            s = verdicts.get(name)
            if s is None:
                why.append("intent: no verdict")
            elif s.verdict not in INTENT_EVIDENCE:
                why.append(f"intent: {s.verdict} ({s.reason})")
        if regress is None:
            why.append("regression tests not run" + ("" if regress_asked else " (--no-regress)"))
        elif regress.get("error"):
            why.append(f"regression: {regress['error']}")
        else:
            r = rows.get(name)
            if r is None:
                why.append("regression: no result (" + (regress.get("note") or "the run did not report it") + ")")
            elif r["outcome"] not in REGRESS_EVIDENCE and r["outcome"] not in ("failed", "missing"):
                why.append(f"regression: {r['outcome']}" + (f" ({r['reason']})" if r.get("reason") else ""))
        if why:
            out[name] = why
    return out

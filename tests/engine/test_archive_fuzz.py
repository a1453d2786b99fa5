"""Fuzzing archive import (hypothesis, bounded budget): random member lists (hostile names, link chains,
duplicates, hard links, devices) in tar.gz and zip form, some of them then damaged. The property: a
one-line SourceError or success; nothing written outside the cache folder; and on success every symlink
of the imported tree, checked out on disk, resolves inside the checkout (the kernel is the oracle).

DSV4_FUZZ_EXAMPLES raises the budget for a long local run; DSV4_FUZZ_REPORT=file.json writes the
counts (inputs tried, refusals, imports, failures,
writes outside the cache, imports with links leading out) there. No switch turns the assertions off:
to measure an older version of the code, read the counts it wrote before its first failure.
"""

from __future__ import annotations

import io
import json
import os
import stat
import tarfile
import tempfile
import warnings
import zipfile
from collections import Counter
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from synth import git

from dsv4_patch.errors import SourceError
from test_archive_safety import TOP, import_bytes

EXAMPLES = int(os.environ.get("DSV4_FUZZ_EXAMPLES", "120"))
COUNTS: Counter = Counter()
PAYLOAD = b"fuzz-payload\n"

# benign parts are drawn most often, so that most inputs get past the name checks to the tree rules
part = st.sampled_from(["a", "b", "sub", "l"] * 3 + ["..", ".", "", ".git", "x y", "\u00e9"])
rel = st.lists(part, min_size=1, max_size=4).map("/".join)
under_top = rel.map(lambda r: f"{TOP}/{r}")
name = st.one_of(under_top, under_top, under_top, rel.map(lambda r: f"{TOP}/sub/l/{r}"), rel, rel.map(lambda r: "/" + r))
link_target = st.one_of(rel, st.just(".."), st.just("../.."), st.just("/tmp"), st.just(""), rel.map(lambda r: "../" + r))
member = st.one_of(
    st.tuples(st.just("file"), name, st.binary(max_size=64) | st.just(PAYLOAD), st.booleans()),
    st.tuples(st.just("link"), name, link_target, st.just(False)),
    st.tuples(st.just("dir"), name, st.just(b""), st.just(False)),
    st.tuples(st.sampled_from(["hardlink", "fifo"]), name, link_target, st.just(False)),
)


def _chain(k: int, up: str, tail: str) -> list:
    """sub/l -> UP, sub/l/s1 -> UP, ... then a file written through the whole chain."""
    links = [f"{TOP}/sub/l" + "".join(f"/s{j}" for j in range(1, i + 1)) for i in range(k)]
    return [("link", n, up, False) for n in links] + [("file", f"{links[-1]}/{tail}", PAYLOAD, False)]


chain = st.builds(_chain, st.integers(1, 6), st.sampled_from(["..", "../..", ".", "../sub"]), st.sampled_from(["evil", "a/evil"]))
damage = st.one_of(st.none(), st.none(), st.none(), st.tuples(st.just("cut"), st.floats(0, 1)), st.tuples(st.just("flip"), st.floats(0, 1)))


def build_tar(members) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as tf:
        for kind, n, data, exe in members:
            info = tarfile.TarInfo(n)
            if kind == "file":
                data = data if isinstance(data, bytes) else data.encode()
                info.size, info.mode = len(data), 0o755 if exe else 0o644
                tf.addfile(info, io.BytesIO(data))
                continue
            info.type = {"link": tarfile.SYMTYPE, "dir": tarfile.DIRTYPE, "hardlink": tarfile.LNKTYPE,
                         "fifo": tarfile.FIFOTYPE}[kind]
            info.linkname = data if isinstance(data, str) else ""
            tf.addfile(info)
    return buf.getvalue()


def build_zip(members) -> bytes:
    buf = io.BytesIO()
    with warnings.catch_warnings(), zipfile.ZipFile(buf, "w") as zf:
        warnings.simplefilter("ignore")  # duplicate names are part of the input space
        for kind, n, data, exe in members:
            info = zipfile.ZipInfo(n + ("/" if kind == "dir" else ""))
            fmt = {"file": stat.S_IFREG, "link": stat.S_IFLNK, "dir": stat.S_IFDIR, "hardlink": stat.S_IFREG,
                   "fifo": stat.S_IFIFO}[kind]
            info.external_attr = (fmt | (0o755 if exe else 0o644)) << 16
            zf.writestr(info, data if isinstance(data, bytes) else data.encode())
    return buf.getvalue()


def damaged(data: bytes, how) -> bytes:
    if how is None:
        return data
    i = min(int(how[1] * len(data)), len(data) - 1)
    return data[:i] if how[0] == "cut" else data[:i] + bytes([data[i] ^ 0xA5]) + data[i + 1:]


def snapshot(root: Path) -> set[str]:
    """Every path under root outside the cache (os.walk: an escaped link must not send it round a loop)."""
    seen = set()
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x != "cache"]
        seen.update(os.path.relpath(os.path.join(d, x), root) for x in dirs + files)
    return seen


def escaping_links(base) -> list[str]:
    """Check the import out with git (in a folder of its own) and let the kernel resolve every symlink."""
    bad = []
    with tempfile.TemporaryDirectory(prefix="dsv4-fuzz-checkout-") as td:
        out = Path(td) / "tree"
        out.mkdir()
        env = {"GIT_DIR": str(base.git_dir), "GIT_INDEX_FILE": str(Path(td) / "index"), "GIT_WORK_TREE": str(out)}
        git(out, "read-tree", base.commit, env=env)
        git(out, "checkout-index", "-a", "-f", env=env)
        root = os.path.realpath(out)
        for d, dirs, files in os.walk(out):
            for x in dirs + files:
                p = os.path.join(d, x)
                if os.path.islink(p):
                    real = os.path.realpath(p)
                    if real != root and not real.startswith(root + os.sep):
                        bad.append(f"{os.path.relpath(p, out)} -> {os.readlink(p)}")
    return bad


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(member, max_size=6), st.none() | chain, st.lists(member, max_size=2), st.sampled_from(["sdist", "wheel"]), damage)
def test_archive_import_is_one_line_error_or_success_and_never_escapes(head, links, tail, kind, how):
    members = [("file", f"{TOP}/base.txt", b"base\n", False)] + head + (links or []) + tail
    with tempfile.TemporaryDirectory(prefix="dsv4-fuzz-") as td:
        top = Path(td)
        # The cache sits 20 levels down: a chain of 6 links (or 8 random ones) climbs at most 16, so even an escape lands
        # in w*/ here, where the snapshot sees it, and never above the temporary folder.
        work = top.joinpath(*[f"w{i}" for i in range(20)])
        work.mkdir(parents=True)
        data = damaged((build_tar if kind == "sdist" else build_zip)(members), how)
        before = snapshot(top)
        COUNTS["tried"] += 1
        failure, bad_links = None, []
        try:
            base = import_bytes(work, data, kind)
        except SourceError as e:
            COUNTS["refused"] += 1
            if "\n" in e.one_line() or not e.message:
                failure = f"not one line: {e.one_line()!r}"
        except Exception as e:  # noqa: BLE001 - a traceback for the user is the failure we look for
            failure = f"{type(e).__name__}: {e}"
        else:
            COUNTS["imported"] += 1
            bad_links = escaping_links(base)
        escaped = snapshot(top) - before
        COUNTS["failures"] += failure is not None
        COUNTS["escapes_written"] += bool(escaped)
        COUNTS["escapes_links"] += bool(bad_links)
        if os.environ.get("DSV4_FUZZ_REPORT"):
            Path(os.environ["DSV4_FUZZ_REPORT"]).write_text(json.dumps(dict(COUNTS)))
        assert failure is None, failure
        assert not escaped, f"written outside the cache: {sorted(escaped)}"
        assert not bad_links, f"imported links that resolve outside the tree: {bad_links}"

"""Issue 28, export: a new commit's patch file is named from its Subject; a non-ASCII Subject, which
git writes as an RFC 2047 encoded word, was named from the encoded bytes
("utf-8-q-dsv4-20thr-c3-a9e-20-e2-80-94-20-e2-9c-93.patch"). The subject is decoded first (and
accents dropped), as a person reads it; a word that does not decode keeps the old naming."""

from __future__ import annotations

import pytest
from synth import numbered

from dsv4_patch.exporter import file_name_for


@pytest.mark.parametrize("subject, name", [
    ("[DSV4] Thrée — ✓", "three.patch"),
    ("[DSV4] Fix the Straße kernel", "fix-the-stra-e-kernel.patch"),
])
def test_a_non_ascii_subject_names_the_file_as_it_reads(env, subject, name):
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, subject)
    assert [p.name for p in env.stack.patch_dir.glob("*.patch")] == [name]


def test_an_encoded_word_that_does_not_decode_keeps_the_old_naming():
    from dsv4_patch.exporter import subject_for_name

    raw = "=?x-no-such-charset?q?abc?= tail"
    assert subject_for_name(raw) == raw
    assert file_name_for(subject_for_name(raw), set()) == "x-no-such-charset-q-abc-tail.patch"

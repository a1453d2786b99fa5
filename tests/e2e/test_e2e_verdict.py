"""Token-level verdicts against the gfx936 bring-up's recorded outputs (fixtures/seed_vectors.toml)."""

from __future__ import annotations

import pytest

from dsv4_patch.e2e.verdict import (
    BOS,
    EMPTY,
    GARBLED,
    NAN,
    REPEAT,
    TRUNCATED,
    Generation,
    SpecialTokens,
    Verdict,
    judge_generation,
    longest_run,
    worst,
)

BOS_TEXT = "<｜begin▁of▁sentence｜>"


def _gen(vec: dict, name: str) -> Generation:
    ids = vec["token_ids"]
    texts = vec.get("token_texts") or [vec["first_text"]] + [BOS_TEXT if t == 0 else f"<{t}>" for t in ids[1:]]
    return Generation(name, ids, texts, vec["finish_reason"], vec["text"], max_tokens=32)


@pytest.mark.parametrize("name", ["J08", "J09", "J11", "J13", "J17"])
def test_seed_vectors_get_the_expected_verdict(seed_vectors, name):
    vec = seed_vectors["vectors"][name]
    j = judge_generation(_gen(vec, name), SpecialTokens(bos_id=seed_vectors["special"]["bos_id"]))
    assert j.verdict.value == vec["expected"], j.reasons
    assert sorted(r.code for r in j.reasons) == sorted(vec["expected_reasons"])


def test_j08_is_not_coherent_although_the_seed_probe_said_so(seed_vectors):
    vec = seed_vectors["vectors"]["J08"]
    assert vec["probe_said"] == "COHERENT"  # the false positive this harness exists to prevent
    j = judge_generation(_gen(vec, "J08"), SpecialTokens(bos_id=0))
    assert j.verdict is Verdict.DEGRADED
    assert "after the first token" in next(r.message for r in j.reasons if r.code == BOS)


@pytest.mark.parametrize("name", ["J08", "J11", "J13"])
def test_bos_is_found_from_per_token_text_when_ids_are_unknown(seed_vectors, name):
    j = judge_generation(_gen(seed_vectors["vectors"][name], name), SpecialTokens(bos_id=None))
    assert BOS in {r.code for r in j.reasons}


def test_j17_is_coherent_without_the_special_ids_too(seed_vectors):
    j = judge_generation(_gen(seed_vectors["vectors"]["J17"], "J17"))
    assert j.verdict is Verdict.COHERENT and j.reasons == []


def test_repeat_run_of_an_ordinary_token_is_degraded():
    ids = [30594] + [666] * 31
    j = judge_generation(Generation("r", ids, None, "length", "你好" + "**" * 31, 32), SpecialTokens(bos_id=0))
    assert [r.code for r in j.reasons] == [REPEAT]


def test_a_run_shorter_than_the_threshold_is_fine():
    ids = [5, 6] + [7] * 7 + list(range(100, 123))
    j = judge_generation(Generation("r", ids, None, "length", "fine text", 32), SpecialTokens(bos_id=0))
    assert j.verdict is Verdict.COHERENT


def test_empty_output_is_degraded():
    j = judge_generation(Generation("e", [], None, "abort", "", 32))
    assert j.verdict is Verdict.DEGRADED and [r.code for r in j.reasons] == [EMPTY]


def test_truncated_with_ignore_eos_is_degraded_but_not_without():
    ids = list(range(10, 20))
    assert TRUNCATED in {r.code for r in judge_generation(Generation("t", ids, None, "abort", "x y z", 32)).reasons}
    j = judge_generation(Generation("t", ids, None, "stop", "x y z", 32, ignore_eos=False))
    assert j.verdict is Verdict.COHERENT


def test_replacement_characters_inside_the_text_are_garbled_but_a_trailing_one_is_not():
    ids = list(range(100, 132))
    bad = judge_generation(Generation("g", ids, None, "length", "ab\ufffd\ufffdcd\ufffdef", 32))
    assert [r.code for r in bad.reasons] == [GARBLED]
    ok = judge_generation(Generation("g", ids, None, "length", "你好，世界\ufffd", 32))
    assert ok.verdict is Verdict.COHERENT


def test_mostly_unprintable_tokens_are_garbled():
    ids = list(range(100, 132))
    texts = ["\ufffd"] * 20 + ["a"] * 12
    j = judge_generation(Generation("g", ids, texts, "length", "aaaaaaaaaaaa", 32))
    assert GARBLED in {r.code for r in j.reasons}


def test_non_finite_logprob_is_nan(seed_vectors):
    vec = dict(seed_vectors["vectors"]["J17"])
    gen = _gen(vec, "J17")
    gen.logprobs_finite = False
    assert [r.code for r in judge_generation(gen, SpecialTokens(bos_id=0)).reasons] == [NAN]


def test_longest_run_ignores_the_prefill_token():
    assert longest_run([0, 0, 0, 1, 2]) == (2, 1, 0)
    assert longest_run([9]) == (0, 1, None)


def test_worst_orders_by_severity_and_empty_is_error():
    assert worst([Verdict.COHERENT, Verdict.DEGRADED, Verdict.ERROR]) is Verdict.ERROR
    assert worst([Verdict.CRASHED, Verdict.COHERENT]) is Verdict.CRASHED
    assert worst([]) is Verdict.ERROR

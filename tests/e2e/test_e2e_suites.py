"""The shipped suites (the hardware regression list of docs/background.md) parse, and the pieces they
rely on behave."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsv4_patch.e2e.prompts import fit_prompt, resolve_length
from dsv4_patch.e2e.suites import for_engine, list_suites, load_suite, parse_suite
from dsv4_patch.errors import ConfigError, UsageError

ROOT = Path(__file__).resolve().parents[2]
SEED_LIST = {"chat32", "chat128", "two-turns", "eight-prompts", "concurrent2", "block-boundary", "swa-border",
             "compressor-boundary", "prefix-caching-ab", "repeat50-nan"}


def test_every_item_of_the_seed_list_has_a_suite_and_all_decode():
    suites = {s.name: s for s in list_suites(ROOT)}
    assert set(suites) == SEED_LIST
    for s in suites.values():
        assert s.max_tokens >= 32 and s.seed.startswith("regression list ")
        assert all(r.max_tokens >= 2 for r in s.worker_requests("vllm", "/m", 8))
    assert len(suites["eight-prompts"].requests) == 8
    assert suites["concurrent2"].batch == "together" and len(suites["concurrent2"].requests) == 2
    assert suites["repeat50-nan"].repeat == 50 and suites["repeat50-nan"].check_finite


def test_prefix_caching_variants_get_engine_specific_arguments():
    s = load_suite(ROOT, "prefix-caching-ab")
    assert [r.engine_args for r in s.worker_requests("vllm", "/m", 1)] == [
        {"enable_prefix_caching": True}, {"enable_prefix_caching": False}]
    assert [r.engine_args for r in s.worker_requests("sglang", "/m", 1)] == [
        {"disable_radix_cache": False}, {"disable_radix_cache": True}]
    assert for_engine({"enforce_eager": True}, "sglang") == {"enforce_eager": True}


def test_unknown_suite_is_a_usage_error_naming_the_known_ones():
    with pytest.raises(UsageError) as e:
        load_suite(ROOT, "nope")
    assert "known suites:" in e.value.one_line() and "chat32" in e.value.one_line()


@pytest.mark.parametrize("body, msg", [
    ('name="x"\ndescription="d"\nmax_tokens=1\n[[requests]]\nturns=["a"]\n', "never exercises decode"),
    ('name="x"\ndescription="d"\n[[requests]]\nturns=["a"]\nprompt_tokens=5\n', "exactly one of"),
    ('name="x"\ndescription="d"\ncolour="red"\n[[requests]]\nturns=["a"]\n', "unknown keys"),
    ('name="x"\ndescription="d"\n[compare]\ntokens=4\n[[requests]]\nturns=["a"]\n', "two or more"),
])
def test_bad_suites_are_rejected(tmp_path, body, msg):
    with pytest.raises(ConfigError, match=msg):
        parse_suite(body, tmp_path / "x.toml")


def test_resolve_length_expressions():
    v = {"block_size": 64, "sliding_window": 128}
    assert [resolve_length(e, v) for e in (65, "65", "block_size", "block_size+1", "2*block_size-1",
                                           "sliding_window-16")] == [65, 65, 64, 65, 127, 112]
    with pytest.raises(ValueError, match="not in the model config"):
        resolve_length("compress_ratio+1", v)


def test_fit_prompt_hits_the_exact_length_with_a_two_token_filler():
    # A tokenizer where the filler is 2 tokens: only a nudge reaches odd targets.
    def count(m):
        return 3 + len(m)
    for target in (63, 64, 65, 128, 129):
        message, got = fit_prompt(count, target, filler=" 1", head="H")
        assert got == target == count(message)

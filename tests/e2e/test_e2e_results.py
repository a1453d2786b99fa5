"""Report rendering and the A/B comparison."""

from __future__ import annotations

from types import SimpleNamespace

from dsv4_patch.e2e.results import compare_variants


def _case(name, ids_by_label):
    return SimpleNamespace(case=name, generations=lambda: [{"label": k, "token_ids": v} for k, v in ids_by_label.items()])


def test_variants_agreeing_on_the_compared_prefix_pass():
    a = _case("on", {"x": [1, 2, 3, 4], "y": [5, 6]})
    b = _case("off", {"x": [1, 2, 3, 9], "y": [5, 6]})
    assert compare_variants([a, b], tokens=3) == []


def test_variants_disagreeing_name_the_label_and_position():
    a = _case("on", {"x": [1, 2, 3, 4]})
    b = _case("off", {"x": [1, 2, 7, 4]})
    [msg] = compare_variants([a, b], tokens=4)
    assert msg.startswith("x: on and off disagree first differ at position 2")


def test_a_missing_generation_in_one_variant_is_a_mismatch():
    assert compare_variants([_case("on", {"x": [1]}), _case("off", {})], tokens=4)

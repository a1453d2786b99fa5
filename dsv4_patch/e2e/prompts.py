"""Prompts of an exact templated length, for the block / SWA / compressor boundary suites.

A boundary test is worthless if the prompt misses the boundary by one token, so the length is the
length after the chat template, counted by the model's own tokenizer, and the worker records the count
the engine reports; the judge turns a miss into an ERROR.
"""

from __future__ import annotations

import re
from typing import Callable

NUDGES = ("1", ".", " ", "a", " a", "!", "1.", " 1.")
EXPR_RE = re.compile(r"^\s*(?:(?P<mul>\d+)\s*\*\s*)?(?P<name>[A-Za-z_]\w*)\s*(?:(?P<sign>[+-])\s*(?P<off>\d+))?\s*$")


def resolve_length(expr: int | str, variables: dict[str, int]) -> int:
    """`65`, `"block_size+1"`, `"2*block_size-1"`, `"sliding_window"` -> an int."""
    if isinstance(expr, int):
        return expr
    text = str(expr).strip()
    if text.isdigit():
        return int(text)
    m = EXPR_RE.match(text)
    if not m:
        raise ValueError(f"prompt length {expr!r}: use N, NAME, NAME+N, NAME-N or K*NAME+N")
    name = m.group("name")
    if name not in variables:
        known = ", ".join(sorted(variables)) or "none"
        raise ValueError(f"prompt length {expr!r}: {name!r} is not in the model config or the suite's [variables] (known: {known})")
    value = int(m.group("mul") or 1) * int(variables[name])
    if m.group("off"):
        value += int(m.group("off")) * (1 if m.group("sign") == "+" else -1)
    if value < 1:
        raise ValueError(f"prompt length {expr!r} resolves to {value}")
    return value


def fit_prompt(count_tokens: Callable[[str], int], target: int, filler: str = " 1",
               head: str = "Count the ones:") -> tuple[str, int]:
    """The user message `head + filler*n` whose templated length is `target`, or the nearest above.

    `count_tokens(message)` returns the templated prompt length for one user message. Lengths grow
    monotonically with n, so a binary search finds the smallest n reaching the target.
    """
    if count_tokens(head) >= target:
        return head, count_tokens(head)
    lo, hi = 0, 1
    while count_tokens(head + filler * hi) < target:
        lo, hi = hi, hi * 2
        if hi > 1_000_000:
            raise ValueError(f"cannot reach {target} prompt tokens with filler {filler!r}")
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if count_tokens(head + filler * mid) < target:
            lo = mid
        else:
            hi = mid
    message = head + filler * hi
    got = count_tokens(message)
    if got > target:
        # The filler unit overshot (it is more than one token): close the gap with a smaller nudge.
        for nudge in NUDGES:
            candidate = head + filler * lo + nudge
            if count_tokens(candidate) == target:
                return candidate, target
    return message, got

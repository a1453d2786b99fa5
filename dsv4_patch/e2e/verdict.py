"""Verdicts for generated tokens and for a whole run.

The rules come from the gfx936 bring-up (docs/background.md, "Judging a run"): a probe that only
asked "is the text non-empty and not conspicuously repetitive" called J08's `[32, 0, 0, ...]` (one '>'
then BOS forever) COHERENT. So a generation is judged on its token ids, its per-token decoded text, its
finish reason and its text together, and a run is judged on the generation, the process exit code, the
scheduler's own state and the device faults in the raw log: none of them alone proves anything.

COHERENT here means "passed every mechanical check"; semantics are for a human reading the text, which
the summary prints.
"""

from __future__ import annotations

import enum
import unicodedata
from dataclasses import dataclass, field


class Verdict(str, enum.Enum):
    COHERENT = "COHERENT"
    DEGRADED = "DEGRADED"  # the engine ran to the end but the output is wrong
    ERROR = "ERROR"  # a stage failed cleanly (exception, bad input, signals that disagree)
    CRASHED = "CRASHED"  # the process died: signal, device fault, time limit, no result at all

    @property
    def severity(self) -> int:
        return _SEVERITY[self]

    @property
    def ok(self) -> bool:
        return self is Verdict.COHERENT


_SEVERITY = {Verdict.COHERENT: 0, Verdict.DEGRADED: 1, Verdict.ERROR: 2, Verdict.CRASHED: 3}


def worst(verdicts) -> Verdict:
    """The most severe verdict; an empty input is an ERROR (nothing was judged, so nothing passed)."""
    verdicts = list(verdicts)
    return max(verdicts, key=lambda v: v.severity) if verdicts else Verdict.ERROR


# Reason codes of a DEGRADED generation (docs/e2e.md lists them).
EMPTY = "empty"
BOS = "bos"
REPEAT = "repeat"
GARBLED = "garbled"
NAN = "nan"
TRUNCATED = "truncated"

# Decoded forms of BOS-like special tokens, used only when the tokenizer's ids were not recorded.
BOS_TEXTS = frozenset({"<｜begin▁of▁sentence｜>", "<s>", "<|begin_of_text|>", "<|startoftext|>"})


@dataclass(frozen=True)
class Reason:
    code: str
    message: str

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


@dataclass(frozen=True)
class SpecialTokens:
    bos_id: int | None = None
    eos_id: int | None = None
    pad_id: int | None = None


@dataclass(frozen=True)
class TokenRules:
    # A run of one token id this long anywhere after the first token is a stuck decoder. Eight keeps
    # ordinary text (a few repeated newlines or spaces) clear of it; J08/J11/J13 have runs of 31.
    max_repeat_run: int = 8
    # Share of tokens that decode to nothing printable above which the output counts as garbled.
    max_unprintable_share: float = 0.5


@dataclass
class Generation:
    """One request's output as the worker recorded it."""

    label: str
    token_ids: list[int]
    token_texts: list[str] | None = None
    finish_reason: str | None = None
    text: str = ""
    max_tokens: int = 32
    ignore_eos: bool = True
    logprobs_finite: bool | None = None  # None: the finite check was not enabled
    prompt_tokens: int | None = None
    target_prompt_tokens: int | None = None

    @classmethod
    def from_dict(cls, d: dict) -> "Generation":
        return cls(
            label=str(d.get("label", "")),
            token_ids=[int(t) for t in d.get("token_ids") or []],
            token_texts=d.get("token_texts"),
            finish_reason=d.get("finish_reason"),
            text=d.get("text") or "",
            max_tokens=int(d.get("max_tokens", 32)),
            ignore_eos=bool(d.get("ignore_eos", True)),
            logprobs_finite=d.get("logprobs_finite"),
            prompt_tokens=d.get("prompt_tokens"),
            target_prompt_tokens=d.get("target_prompt_tokens"),
        )


@dataclass
class GenerationJudgement:
    label: str
    verdict: Verdict
    reasons: list[Reason] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"label": self.label, "verdict": self.verdict.value, "reasons": [r.__dict__ for r in self.reasons]}


def _positions(ids: list[int], texts: list[str] | None, special: SpecialTokens) -> list[int]:
    if special.bos_id is not None:
        return [i for i, t in enumerate(ids) if t == special.bos_id]
    if texts:
        return [i for i, s in enumerate(texts) if s in BOS_TEXTS]
    return []


def longest_run(ids: list[int], start: int = 1) -> tuple[int, int, int | None]:
    """(length, start position, token id) of the longest run of one id at or after `start`."""
    best = (0, start, None)
    i = start
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[i]:
            j += 1
        if j - i + 1 > best[0]:
            best = (j - i + 1, i, ids[i])
        i = j + 1
    return best


def _unprintable(s: str) -> bool:
    """A per-token text that shows nothing a reader could use (partial UTF-8, controls, nothing)."""
    stripped = s.replace("\ufffd", "")
    if not stripped:
        return True
    return all(unicodedata.category(c) in ("Cc", "Cf", "Co", "Cn") and c not in "\n\t\r" for c in stripped)


def _garbled(gen: Generation, rules: TokenRules) -> str | None:
    body = gen.text.rstrip("\ufffd")  # the last token may end inside a multi-byte character
    if "\ufffd" in body:
        return f"the text holds {body.count(chr(0xFFFD))} U+FFFD replacement character(s) before its end"
    controls = [c for c in gen.text if unicodedata.category(c) == "Cc" and c not in "\n\t\r"]
    if controls and len(controls) * 10 > len(gen.text):
        return f"{len(controls)} control characters in {len(gen.text)}"
    if gen.token_texts:
        bad = sum(1 for s in gen.token_texts if _unprintable(s))
        # Byte-level BPE splits some CJK characters over two tokens, so only a majority counts.
        if bad > rules.max_unprintable_share * len(gen.token_texts):
            return f"{bad} of {len(gen.token_texts)} tokens decode to nothing printable"
    return None


def judge_generation(
    gen: Generation, special: SpecialTokens = SpecialTokens(), rules: TokenRules = TokenRules()
) -> GenerationJudgement:
    ids = gen.token_ids
    reasons: list[Reason] = []
    if not ids:
        reasons.append(Reason(EMPTY, "no tokens were generated"))
        return GenerationJudgement(gen.label, Verdict.DEGRADED, reasons)
    bos_at = _positions(ids, gen.token_texts, special)
    if bos_at:
        after_first = [p for p in bos_at if p >= 1]
        where = "after the first token" if after_first and bos_at[0] >= 1 else "from the first token"
        reasons.append(
            Reason(BOS, f"BOS at {len(bos_at)} of {len(ids)} positions {where} (first at position {bos_at[0]})")
        )
    run, run_at, run_id = longest_run(ids, start=1)
    if run >= rules.max_repeat_run:
        reasons.append(Reason(REPEAT, f"token {run_id} repeated {run} times from position {run_at}"))
    if gen.ignore_eos and len(ids) < gen.max_tokens:
        reasons.append(
            Reason(TRUNCATED, f"{len(ids)} of {gen.max_tokens} tokens with ignore_eos (finish reason {gen.finish_reason!r})")
        )
    if not gen.text.strip():
        reasons.append(Reason(EMPTY, f"{len(ids)} tokens decode to an empty text"))
    else:
        garbled = _garbled(gen, rules)
        if garbled:
            reasons.append(Reason(GARBLED, garbled))
    if gen.logprobs_finite is False:
        reasons.append(Reason(NAN, "a sampled token's log-probability is not finite (NaN/inf logits)"))
    return GenerationJudgement(gen.label, Verdict.DEGRADED if reasons else Verdict.COHERENT, reasons)

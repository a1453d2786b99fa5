"""Declarative suites: one small TOML file each under `e2e/suites/`, one per item of the
hardware regression list (docs/background.md).

    name = "chat32"
    description = "..."
    seed = "regression list 1"
    max_tokens = 32            # >= 2 always: the first token comes from prefill
    batch = "sequential"       # or "together": all requests in one generate call (concurrency)
    repeat = 1                 # run the requests this many times in one engine (rare NaNs)
    check_finite = false       # ask for sampled-token logprobs and require them finite
    timeout_s = 3600           # local launcher: stop the run after this long
    max_repeat_run = 8         # a run of one token id this long is a stuck decoder

    [variables]                # values for prompt_tokens expressions (the model config adds its ints)
    block_size = 64

    [engine_args]              # passed to vllm.LLM / sglang.Engine for every variant

    [[requests]]
    id = "zh-intro"
    turns = ["你好，请介绍一下你自己。"]            # one or more user turns
    # or: prompt_tokens = [63, 64, "block_size+1"]   # synthetic prompts of these templated lengths

    [[variants]]               # optional: each variant is its own engine run (its own job)
    name = "prefix-caching-on"
    engine_args = { vllm = { enable_prefix_caching = true }, sglang = { disable_radix_cache = false } }

engine_args keyed by engine name (vllm / sglang) apply to that engine only; otherwise to both.

    [compare]                  # optional: variants must agree (A/B)
    tokens = 32                # compare the first N token ids of every generation
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from ..errors import ConfigError, UsageError
from .protocol import DEFAULT_MAX_TOKENS, MIN_MAX_TOKENS, RequestSpec, WorkerRequest

SUITES_DIR = Path("e2e") / "suites"
SUITE_KEYS = {
    "name", "description", "seed", "max_tokens", "batch", "repeat", "check_finite", "timeout_s",
    "max_repeat_run", "variables", "engine_args", "requests", "variants", "compare",
}
REQUEST_KEYS = {"id", "turns", "system", "prompt_tokens", "filler"}


@dataclass
class Variant:
    name: str
    engine_args: dict = field(default_factory=dict)


@dataclass
class Suite:
    name: str
    description: str
    path: Path
    requests: list[RequestSpec]
    seed: str = ""
    max_tokens: int = DEFAULT_MAX_TOKENS
    batch: str = "sequential"
    repeat: int = 1
    check_finite: bool = False
    timeout_s: float = 3600.0
    max_repeat_run: int = 8
    variables: dict = field(default_factory=dict)
    engine_args: dict = field(default_factory=dict)
    variants: list[Variant] = field(default_factory=lambda: [Variant("default")])
    compare_tokens: int | None = None

    def worker_requests(self, engine: str, model: str, tp: int, max_tokens: int | None = None) -> list[WorkerRequest]:
        n = self.max_tokens if max_tokens is None else max_tokens
        if n < MIN_MAX_TOKENS:
            raise UsageError(f"max_tokens {n} < {MIN_MAX_TOKENS}: the first token comes from prefill, "
                             "so one token never exercises decode")
        out = []
        for v in self.variants:
            args = for_engine(self.engine_args, engine)
            args.update(for_engine(v.engine_args, engine))
            out.append(WorkerRequest(
                engine=engine, model=model, tp=tp, case=v.name, requests=self.requests, max_tokens=n,
                batch=self.batch, repeat=self.repeat, check_finite=self.check_finite, engine_args=args,
                variables=dict(self.variables), max_repeat_run=self.max_repeat_run,
            ))
        return out


def for_engine(args: dict, engine: str) -> dict:
    """`{vllm = {...}, sglang = {...}}` -> the engine's part; a flat table applies to every engine."""
    if args and set(args) <= {"vllm", "sglang"}:
        return dict(args.get(engine, {}))
    return dict(args)


def _expand_requests(raw: list[dict], where: str) -> list[RequestSpec]:
    out: list[RequestSpec] = []
    for i, r in enumerate(raw):
        unknown = set(r) - REQUEST_KEYS
        if unknown:
            raise ConfigError(f"{where}: [[requests]] #{i + 1} has unknown keys {sorted(unknown)}")
        rid = r.get("id") or f"r{i + 1}"
        turns = list(r.get("turns", []))
        lengths = r.get("prompt_tokens")
        if bool(turns) == (lengths is not None):
            raise ConfigError(f"{where}: request {rid!r} needs exactly one of turns or prompt_tokens")
        if lengths is None:
            out.append(RequestSpec(id=rid, turns=turns, system=r.get("system")))
            continue
        for n in lengths if isinstance(lengths, list) else [lengths]:
            out.append(RequestSpec(id=f"{rid}-{str(n).replace(' ', '')}", prompt_tokens=n, system=r.get("system"),
                                   filler=r.get("filler", " 1")))
    ids = [r.id for r in out]
    dup = {x for x in ids if ids.count(x) > 1}
    if dup:
        raise ConfigError(f"{where}: duplicate request ids {sorted(dup)}")
    return out


def parse_suite(text: str, path: Path) -> Suite:
    try:
        d = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: {e}") from None
    unknown = set(d) - SUITE_KEYS
    if unknown:
        raise ConfigError(f"{path}: unknown keys {sorted(unknown)}", hint=f"known: {sorted(SUITE_KEYS)}")
    for key in ("name", "description", "requests"):
        if not d.get(key):
            raise ConfigError(f"{path}: needs {key!r}")
    if d.get("batch", "sequential") not in ("sequential", "together"):
        raise ConfigError(f"{path}: batch must be 'sequential' or 'together'")
    max_tokens = int(d.get("max_tokens", DEFAULT_MAX_TOKENS))
    if max_tokens < MIN_MAX_TOKENS:
        raise ConfigError(f"{path}: max_tokens {max_tokens} < {MIN_MAX_TOKENS} never exercises decode")
    variants = [Variant(v["name"], dict(v.get("engine_args", {}))) for v in d.get("variants", [])] or [Variant("default")]
    compare = d.get("compare")
    if compare is not None and len(variants) < 2:
        raise ConfigError(f"{path}: [compare] needs two or more [[variants]]")
    return Suite(
        name=d["name"], description=d["description"], path=path,
        requests=_expand_requests(d["requests"], str(path)), seed=d.get("seed", ""),
        max_tokens=max_tokens, batch=d.get("batch", "sequential"), repeat=int(d.get("repeat", 1)),
        check_finite=bool(d.get("check_finite", False)), timeout_s=float(d.get("timeout_s", 3600)),
        max_repeat_run=int(d.get("max_repeat_run", 8)), variables=dict(d.get("variables", {})),
        engine_args=dict(d.get("engine_args", {})), variants=variants,
        compare_tokens=int(compare.get("tokens", max_tokens)) if compare is not None else None,
    )


def suites_dir(root: Path) -> Path:
    return root / SUITES_DIR


def list_suites(root: Path) -> list[Suite]:
    return [parse_suite(p.read_text(encoding="utf-8"), p) for p in sorted(suites_dir(root).glob("*.toml"))]


def load_suite(root: Path, name_or_path: str) -> Suite:
    p = Path(name_or_path)
    if p.suffix == ".toml" and p.exists():
        return parse_suite(p.read_text(encoding="utf-8"), p)
    p = suites_dir(root) / f"{name_or_path}.toml"
    if not p.exists():
        known = ", ".join(s.stem for s in sorted(suites_dir(root).glob("*.toml"))) or "none"
        raise UsageError(f"no suite named {name_or_path!r} in {suites_dir(root)}", hint=f"known suites: {known}")
    return parse_suite(p.read_text(encoding="utf-8"), p)

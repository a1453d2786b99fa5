"""The worker that runs inside the job: `python -m dsv4_patch.e2e.worker --request R --result X`.

It answers the gfx936 bring-up probe's five questions one at a time, printing `### STAGE: <name>`
before each and rewriting result.json after each, so a crash still leaves the stages that passed on
disk:

    env          python, torch, devices (enough for --tp?), the DSV4_/VLLM_/SGLANG_ environment
    config       the model's config.json: architectures, quantization, integer fields for suites
    import       import vllm / sglang and find the model's architecture in its registry
    engine_init  build the engine (the real test: weights, kernels, KV cache)
    generate     chat template, greedy, ignore_eos, >= 2 tokens; token ids, per-token text, finish
                 reason and text of every request, optional logprob finite check

Then it prints the bring-up probe's markers (TOKEN_IDS, FINISH_REASON, TOKEN_DECODE, OUTPUT_REPR, DSV4_VERDICT)
and exits 0 (COHERENT), 2 (DEGRADED), 1 (a stage failed) or 3 (unusable request): see protocol.py.
Only the standard library is imported at module level; the engine is imported in its stage.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .prompts import fit_prompt, resolve_length
from .protocol import (
    DONE_MARKER,
    RESULT_SCHEMA,
    WORKER_BAD_REQUEST,
    WORKER_DEGRADED,
    WORKER_OK,
    WORKER_STAGE_FAILED,
    WorkerRequest,
)
from .verdict import Generation, SpecialTokens, TokenRules, Verdict, judge_generation

ENV_PREFIXES = ("DSV4_", "VLLM_", "SGLANG_", "HIP_", "ROCR_", "CUDA_", "HSA_", "NCCL_", "RCCL_", "TORCH", "HF_",
                "TRANSFORMERS_")


class StageFailed(Exception):
    pass


@dataclass
class RawOutput:
    """What an engine adapter returns for one prompt."""

    token_ids: list[int]
    text: str
    finish_reason: str | None
    prompt_tokens: int | None
    logprobs: list[float] | None = None  # sampled-token logprobs when requested


class Recorder:
    """result.json, rewritten after every stage so that a crash leaves what was learned."""

    def __init__(self, path: Path, request: WorkerRequest):
        self.path = Path(path)
        self.data = {
            "schema": RESULT_SCHEMA,
            "engine": request.engine,
            "engine_version": None,
            "model": request.model,
            "tp": request.tp,
            "case": request.case,
            "hardware": None,
            "stages": [],
            "special_token_ids": {},
            "generations": [],
            "self_verdict": None,
        }

    def flush(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=2, ensure_ascii=False), encoding="utf-8")
        tmp.replace(self.path)  # never leave a half-written result for the harness to misread

    @contextmanager
    def stage(self, name: str):
        print(f"### STAGE: {name}", flush=True)
        entry = {"name": name, "status": "running", "seconds": None, "details": {}}
        self.data["stages"].append(entry)
        self.flush()
        start = time.monotonic()
        try:
            yield entry["details"]
        except Exception as e:  # noqa: BLE001 - every failure of a stage is recorded, then re-raised
            tb = traceback.format_exc()
            print(tb, file=sys.stderr, flush=True)
            entry.update(status="failed", seconds=round(time.monotonic() - start, 3),
                         error={"type": type(e).__name__, "message": str(e)[:2000], "traceback": tb[-8000:]})
            self.flush()
            raise StageFailed(name) from e
        entry.update(status="ok", seconds=round(time.monotonic() - start, 3))
        self.flush()


# ----------------------------------------------------------------------------------------- stages
def env_stage(req: WorkerRequest, details: dict) -> str | None:
    details["python"] = sys.version.split()[0]
    details["platform"] = platform.platform()
    details["environment"] = {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)}
    import torch  # the engines need it anyway; its absence is an env failure

    details["torch"] = torch.__version__
    details["hip"] = getattr(torch.version, "hip", None)
    details["cuda"] = getattr(torch.version, "cuda", None)
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    details["device_count"] = count
    devices = []
    for i in range(count):
        p = torch.cuda.get_device_properties(i)
        devices.append({"name": p.name, "arch": getattr(p, "gcnArchName", None),
                        "memory_gib": round(p.total_memory / 2**30, 1)})
    details["devices"] = devices
    if count < req.tp:
        raise RuntimeError(f"{count} device(s) visible, --tp {req.tp} needs {req.tp}")
    return hardware_name(devices[0]) if devices else None


def hardware_name(dev: dict) -> str:
    """gfx936 for a DCU (gcnArchName 'gfx936:sramecc+:xnack-'), B200/H200 for NVIDIA, else the name."""
    arch = (dev.get("arch") or "").split(":")[0]
    if arch.startswith("gfx"):
        return arch
    name = dev.get("name") or "unknown"
    for short in ("B200", "B300", "GB200", "H200", "H100", "A100"):
        if short in name:
            return short
    return name


def config_stage(req: WorkerRequest, details: dict) -> dict:
    path = Path(req.model) / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no model config (--model must be a local checkpoint directory)")
    cfg = json.loads(path.read_text(encoding="utf-8"))
    details["architectures"] = cfg.get("architectures")
    details["model_type"] = cfg.get("model_type")
    details["quantization_config"] = cfg.get("quantization_config")
    ints = {k: v for k, v in cfg.items() if isinstance(v, int) and not isinstance(v, bool)}
    details["integer_fields"] = ints
    return cfg


def make_adapter(engine: str):
    if engine == "vllm":
        return VllmAdapter()
    if engine == "sglang":
        return SglangAdapter()
    raise ValueError(f"engine {engine!r}: use vllm or sglang")


class VllmAdapter:
    name = "vllm"

    def load(self, architectures: list[str], details: dict) -> str:
        import vllm
        from vllm import ModelRegistry

        supported = set(ModelRegistry.get_supported_archs())
        details["registered"] = sorted(set(architectures) & supported)
        if architectures and not details["registered"]:
            raise RuntimeError(f"vLLM {vllm.__version__} registers none of {architectures}")
        details["module"] = vllm.__file__
        return vllm.__version__

    def start(self, req: WorkerRequest) -> None:
        from vllm import LLM

        args = {"trust_remote_code": True} | dict(req.engine_args)
        self.llm = LLM(model=req.model, tensor_parallel_size=req.tp, **args)
        self.tok = self.llm.get_tokenizer()

    def tokenizer(self):
        return self.tok

    def generate(self, items: list[dict], req: WorkerRequest) -> list[RawOutput]:
        from vllm import SamplingParams

        sp = SamplingParams(max_tokens=req.max_tokens, temperature=0.0, ignore_eos=req.ignore_eos,
                            logprobs=0 if req.check_finite else None)
        chats = [i["messages"] for i in items if "messages" in i]
        tokens = [{"prompt_token_ids": i["prompt_token_ids"]} for i in items if "prompt_token_ids" in i]
        outs = iter(self.llm.chat(chats, sp, use_tqdm=False) if chats else [])
        touts = iter(self.llm.generate(tokens, sp, use_tqdm=False) if tokens else [])
        result = []
        for item in items:  # back into the caller's order
            o = next(outs) if "messages" in item else next(touts)
            c = o.outputs[0]
            lps = None
            if req.check_finite and c.logprobs is not None:
                lps = [float(step[tid].logprob) for step, tid in zip(c.logprobs, c.token_ids)]
            result.append(RawOutput(list(c.token_ids), c.text, c.finish_reason,
                                    len(o.prompt_token_ids) if o.prompt_token_ids is not None else None, lps))
        return result

    def shutdown(self) -> None:
        pass  # vLLM tears down at interpreter exit; its ROCm shutdown noise (libcudart) is known


class SglangAdapter:
    name = "sglang"

    def load(self, architectures: list[str], details: dict) -> str:
        import sglang

        try:
            from sglang.srt.models.registry import ModelRegistry

            supported = set(ModelRegistry.get_supported_archs())
            details["registered"] = sorted(set(architectures) & supported)
            if architectures and not details["registered"]:
                raise RuntimeError(f"SGLang {sglang.__version__} registers none of {architectures}")
        except ImportError as e:
            details["registry_unavailable"] = str(e)
        details["module"] = sglang.__file__
        return sglang.__version__

    def start(self, req: WorkerRequest) -> None:
        import sglang
        from transformers import AutoTokenizer

        args = {"trust_remote_code": True} | dict(req.engine_args)
        self.engine = sglang.Engine(model_path=req.model, tp_size=req.tp, **args)
        self.tok = AutoTokenizer.from_pretrained(req.model, trust_remote_code=True)

    def tokenizer(self):
        return self.tok

    def generate(self, items: list[dict], req: WorkerRequest) -> list[RawOutput]:
        ids = [i.get("prompt_token_ids") or self.tok.apply_chat_template(i["messages"], tokenize=True,
                                                                          add_generation_prompt=True)
               for i in items]
        sp = {"max_new_tokens": req.max_tokens, "temperature": 0.0, "ignore_eos": req.ignore_eos}
        outs = self.engine.generate(input_ids=ids, sampling_params=sp, return_logprob=req.check_finite)
        result = []
        for prompt, o in zip(ids, outs):
            meta = o.get("meta_info", {})
            fr = meta.get("finish_reason")
            if "output_ids" not in o:
                raise RuntimeError("SGLang returned no output_ids: token-level checks impossible")
            lps = None
            if req.check_finite:
                lps = [float(x[0]) if x[0] is not None else math.nan for x in meta.get("output_token_logprobs", [])]
            result.append(RawOutput(list(o["output_ids"]), o.get("text", ""),
                                    fr.get("type") if isinstance(fr, dict) else fr, len(prompt), lps))
        return result

    def shutdown(self) -> None:
        self.engine.shutdown()


# ------------------------------------------------------------------------------------ generation
def _count_templated(tok, message: str, system: str | None) -> int:
    return len(_template_ids(tok, message, system))


def _template_ids(tok, message: str, system: str | None) -> list[int]:
    msgs = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": message}]
    ids = tok.apply_chat_template(msgs, tokenize=True, add_generation_prompt=True)
    return list(ids["input_ids"] if isinstance(ids, dict) else ids)


def _decode_each(tok, ids: list[int]) -> list[str]:
    # One call per token, special tokens kept: BOS must be visible per token even when the final text
    # drops it (the bring-up learned not to grep only the output text).
    return [tok.decode([t], skip_special_tokens=False) for t in ids]


def generate_stage(adapter, req: WorkerRequest, variables: dict, details: dict) -> tuple[list[dict], SpecialTokens]:
    tok = adapter.tokenizer()
    special = SpecialTokens(getattr(tok, "bos_token_id", None), getattr(tok, "eos_token_id", None),
                            getattr(tok, "pad_token_id", None))
    # Fixed prompts first: fitting lengths needs the tokenizer but no engine call.
    prepared = []
    for spec in req.requests:
        if spec.prompt_tokens is not None:
            target = resolve_length(spec.prompt_tokens, variables)
            message, got = fit_prompt(lambda m: _count_templated(tok, m, spec.system), target, spec.filler)
            prepared.append((spec, [{"prompt_token_ids": _template_ids(tok, message, spec.system)}], target))
        else:
            prepared.append((spec, None, None))
    gens: list[dict] = []
    for rep in range(req.repeat):
        # conversations[i] holds the running chat of request i (multi-turn: the model's own replies).
        convs = {spec.id: ([{"role": "system", "content": spec.system}] if spec.system else []) for spec, _, _ in prepared}
        max_turns = max((len(s.turns) if s.turns else 1) for s, _, _ in prepared)
        for turn in range(max_turns):
            batch = []
            for spec, fixed, target in prepared:
                if fixed is not None:
                    if turn == 0:
                        batch.append((spec, fixed[0], target))
                elif turn < len(spec.turns):
                    convs[spec.id].append({"role": "user", "content": spec.turns[turn]})
                    batch.append((spec, {"messages": list(convs[spec.id])}, None))
            groups = [batch] if req.batch == "together" else [[b] for b in batch]
            for group in groups:
                outs = adapter.generate([item for _, item, _ in group], req)
                for (spec, item, target), out in zip(group, outs):
                    if "messages" in item:
                        convs[spec.id].append({"role": "assistant", "content": out.text})
                    label = spec.id + (f"/turn{turn + 1}" if len(spec.turns) > 1 else "")
                    label += f"#{rep + 1}" if req.repeat > 1 else ""
                    finite = None
                    if req.check_finite:
                        finite = bool(out.logprobs) and all(math.isfinite(x) for x in out.logprobs)
                    gens.append({
                        "label": label, "token_ids": out.token_ids, "token_texts": _decode_each(tok, out.token_ids),
                        "finish_reason": out.finish_reason, "text": out.text, "max_tokens": req.max_tokens,
                        "ignore_eos": req.ignore_eos, "logprobs_finite": finite, "prompt_tokens": out.prompt_tokens,
                        "target_prompt_tokens": target,
                    })
    details["generations"] = len(gens)
    return gens, special


def print_generation(g: dict) -> None:
    print(f"### RESULT: {g['label']}")
    print(f"TOKEN_IDS: {g['token_ids']}")
    print(f"FINISH_REASON: {g['finish_reason']}")
    print(f"TOKEN_DECODE: {g['token_texts']!r}")
    print(f"OUTPUT_REPR: {g['text']!r}", flush=True)


# ------------------------------------------------------------------------------------------- main
def run(req: WorkerRequest, result_path: Path, adapter=None) -> int:
    rec = Recorder(result_path, req)
    rec.flush()
    adapter = adapter or make_adapter(req.engine)
    try:
        with rec.stage("env") as d:
            rec.data["hardware"] = env_stage(req, d) if not hasattr(adapter, "env") else adapter.env(req, d)
        with rec.stage("config") as d:
            cfg = adapter.config(req, d) if hasattr(adapter, "config") else config_stage(req, d)
            variables = {k: v for k, v in cfg.items() if isinstance(v, int) and not isinstance(v, bool)}
            variables.update(req.variables)
        with rec.stage("import") as d:
            rec.data["engine_version"] = adapter.load(list(cfg.get("architectures") or []), d)
        with rec.stage("engine_init") as d:
            t0 = time.monotonic()
            adapter.start(req)
            d["ready_s"] = round(time.monotonic() - t0, 1)
            print(f"ENGINE_READY in {d['ready_s']}s", flush=True)
        with rec.stage("generate") as d:
            gens, special = generate_stage(adapter, req, variables, d)
            rec.data["generations"] = gens
            rec.data["special_token_ids"] = {"bos": special.bos_id, "eos": special.eos_id, "pad": special.pad_id}
    except StageFailed:
        return WORKER_STAGE_FAILED
    rules = TokenRules(max_repeat_run=req.max_repeat_run)
    verdicts = []
    for g in gens:
        print_generation(g)
        verdicts.append(judge_generation(Generation.from_dict(g), special, rules).verdict)
    ok = bool(verdicts) and all(v is Verdict.COHERENT for v in verdicts)
    rec.data["self_verdict"] = (Verdict.COHERENT if ok else Verdict.DEGRADED).value
    rec.flush()
    print(f"DSV4_VERDICT: {rec.data['self_verdict']}", flush=True)
    print(DONE_MARKER, flush=True)
    try:
        adapter.shutdown()
    except Exception:  # noqa: BLE001 - shutdown trouble after the verdict is logged, not a result
        traceback.print_exc()
    return WORKER_OK if ok else WORKER_DEGRADED


def main(argv: list[str] | None = None, adapter=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dsv4_patch.e2e.worker")
    ap.add_argument("--request", required=True, type=Path)
    ap.add_argument("--result", required=True, type=Path)
    args = ap.parse_args(argv)
    try:
        req = WorkerRequest.load(args.request)
    except (OSError, ValueError, TypeError) as e:
        print(f"unusable request {args.request}: {e}", file=sys.stderr)
        return WORKER_BAD_REQUEST
    return run(req, args.result, adapter)


if __name__ == "__main__":
    sys.exit(main())

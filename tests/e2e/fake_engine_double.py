"""TEST DOUBLE: a scripted fake engine process. Not an engine; never used outside tests.

Runs the real worker (dsv4_patch.e2e.worker.run: stage markers, result.json, markers, exit codes)
with a fake engine adapter whose behaviour is chosen by FAKE_ENGINE_SCENARIO:

    coherent         J17's tokens (the bring-up's acceptance run), exit 0
    j08-weak-probe   J08's tokens [32, 0, 0, ...]; the worker exits 2 but this script exits 0, as the
                     bring-up's early probe did: the harness must still say DEGRADED
    degraded         J11's tokens, the worker's own exit code (2)
    python-fails     engine init raises (J12's assertion), exit 1
    hang             engine init sleeps FAKE_ENGINE_SLEEP seconds (default 3600), for time limits
    segfault         kills itself with SIGSEGV during generation
    device-fault     prints a ROCm VMFault line during generation and aborts
    noise-coherent   J17 tokens with the two known noise messages in the log, exit 0
    nan              J17 tokens but a non-finite sampled-token logprob (check_finite)
    short-prompt     J17 tokens, but reports a prompt length other than the target

    python tests/e2e/fake_engine_double.py --request R --result X
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout, for dsv4_patch

from dsv4_patch.e2e import worker  # noqa: E402
from dsv4_patch.e2e.protocol import WorkerRequest  # noqa: E402

BOS = 0
J17_IDS = [223, 30594, 9790, 303, 70037, 12203, 10706, 804, 1175, 10539, 637, 53897, 96240, 2996, 84998, 666,
           3118, 637, 58368, 621, 666, 5, 53091, 4374, 1465, 223, 1959, 17585, 42108, 303, 56463, 10162]
J17_TEXTS = [" ", "你好", "呀", " ,", "很高兴", "在这里", "遇到", "你", "！", "让我", "来", "做个", "自我介绍", "吧",
             "～\n\n", "**", "初", "来", "乍", "到", "**", "：", "Deep", "Se", "ek", " ", "这个", "版本", "的我",
             " ,", "确实是", "有点"]
VOCAB = {BOS: "<｜begin▁of▁sentence｜>", 32: ">", 30594: "你好"} | dict(zip(J17_IDS, J17_TEXTS))


class FakeTokenizer:
    bos_token_id = BOS
    eos_token_id = 1
    pad_token_id = None

    def apply_chat_template(self, messages, tokenize=True, add_generation_prompt=True):
        # One id per character plus 3 template tokens: enough structure for prompt-length fitting.
        text = "".join(m["content"] for m in messages)
        return [7] * (len(text) + 3)

    def decode(self, ids, skip_special_tokens=True):
        return "".join(VOCAB.get(i, f"<{i}>") for i in ids if not (skip_special_tokens and i == BOS))


class FakeAdapter:
    name = "fake"

    def __init__(self, scenario: str):
        self.scenario = scenario
        self.tok = FakeTokenizer()

    def env(self, req, details):
        details["fake"] = True
        return "fakehw"

    def config(self, req, details):
        details["architectures"] = ["DeepseekV4ForCausalLM"]
        return {"architectures": ["DeepseekV4ForCausalLM"], "sliding_window": 128}

    def load(self, architectures, details):
        details["registered"] = architectures
        return "0.0.0-fake"

    def start(self, req: WorkerRequest):
        if self.scenario == "python-fails":
            raise AssertionError("DeepseekV4 fp8_ds_mla layout only supports fp8 kv-cache, got auto")
        if self.scenario == "hang":
            time.sleep(float(os.environ.get("FAKE_ENGINE_SLEEP", "3600")))
        if self.scenario == "noise-coherent":
            t = threading.Thread(target=_usage_report_noise, name="Thread-1 (_report_usage_worker)")
            t.start()
            t.join()

    def tokenizer(self):
        return self.tok

    def generate(self, items, req: WorkerRequest):
        if self.scenario == "segfault":
            os.kill(os.getpid(), signal.SIGSEGV)
        if self.scenario == "device-fault":
            print("Memory access fault by GPU node-2 (Agent handle: 0x55d) on address 0x7f3c. "
                  "Reason: Page not present or supervisor privilege.", file=sys.stderr, flush=True)
            os.abort()
        if self.scenario in ("j08-weak-probe",):
            ids = [32] + [BOS] * (req.max_tokens - 1)
        elif self.scenario == "degraded":
            ids = [30594] + [BOS] * (req.max_tokens - 1)
        else:
            ids = (J17_IDS * 8)[: req.max_tokens]
        out = []
        for item in items:
            n_prompt = len(item.get("prompt_token_ids") or self.tok.apply_chat_template(item["messages"]))
            if self.scenario == "short-prompt":
                n_prompt -= 1
            lps = [-0.1] * len(ids)
            if self.scenario == "nan":
                lps[5] = float("nan")
            out.append(worker.RawOutput(ids, self.tok.decode(ids), "length", n_prompt, lps))
        return out

    def shutdown(self):
        if self.scenario == "noise-coherent":
            # The ROCm shutdown assertion (libcudart), printed the way Python prints atexit failures.
            print("Exception ignored in atexit callback: <function shutdown at 0x7f>", file=sys.stderr)
            print("Traceback (most recent call last):\n  File \"cumem.py\", line 60, in find_loaded_library\n"
                  "    raise AssertionError(msg)\nAssertionError: libcudart is not loaded in the current process, "
                  "try setting VLLM_CUDART_SO_PATH", file=sys.stderr, flush=True)


def _usage_report_noise():
    import json

    json.loads("")  # JSONDecodeError in the usage-report thread; threading prints it


def main() -> int:
    scenario = os.environ.get("FAKE_ENGINE_SCENARIO", "coherent")
    rc = worker.main(sys.argv[1:], adapter=FakeAdapter(scenario))
    if scenario == "j08-weak-probe":
        return 0  # the bring-up's early probe: non-empty, not conspicuously repetitive -> exit 0
    return rc


if __name__ == "__main__":
    sys.exit(main())

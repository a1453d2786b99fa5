"""Run one of SGLang's registered unit tests the way SGLang does (`python3 FILE`, unittest), with the
stand-in modules of _o_fp8_qdq_probe.py for imports SGLang's CI has installed and this CPU machine
does not: flash_attn and torchvision (multimodal code), datasets (sglang.test.test_utils imports the
benchmark datasets). Stubs are given only to imports made from sglang's own files.

    python _in_tree_runner.py FILE [unittest args]
"""

import runpy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _o_fp8_qdq_probe as probe  # noqa: E402

probe.STUBBED = probe.STUBBED + ("datasets",)
sys.meta_path.append(probe._StubFinder())
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")

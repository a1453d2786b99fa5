"""Run one of SGLang's registered unit tests the way SGLang does (`python3 FILE`, unittest), with the
stand-in modules of _o_fp8_qdq_probe.py for imports SGLang's CI has installed and this CPU machine
does not: flash_attn and torchvision (multimodal code), datasets (sglang.test.test_utils imports the
benchmark datasets). Stubs are given only to imports made from sglang's own files.

    python _in_tree_runner.py [--preload MODULE=PATH]... FILE [unittest args]

--preload loads the Python file PATH as the module MODULE before FILE runs (used to run the patch's
test on the pinned tree with the reference module the patch adds, so that it fails on behaviour,
not on that import).
"""

import importlib.util
import runpy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _o_fp8_qdq_probe as probe  # noqa: E402

probe.STUBBED = probe.STUBBED + ("datasets",)
sys.meta_path.append(probe._StubFinder())
sys.argv = sys.argv[1:]
while sys.argv[0] == "--preload":
    name, _, path = sys.argv[1].partition("=")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")

"""torch.compile(fullgraph=True) of a function that calls o_fp8_qdq_ on CUDA: does Dynamo trace the
raw Triton launch (in place on o), and is the result bit-equal with eager? Needs a CUDA GPU (torch and triton only).

    python kernels/o_fp8_qdq/torch_compile_check.py kernels/o_fp8_qdq/sglang_o_fp8_qdq.py

Prints one line per (T, backend) and "ALL OK" at the end. Run on the H200 on 2026-12-01:
results/h200-2026-12-01-torch-compile.log.
"""
import importlib.util
import sys

import torch

spec = importlib.util.spec_from_file_location("o_fp8_qdq", sys.argv[1])
m = importlib.util.module_from_spec(spec); sys.modules["o_fp8_qdq"] = m; spec.loader.exec_module(m)
print(torch.__version__, torch.cuda.get_device_name())
def f(o, w):
    o = o * 1.0                # an op before, so o is an intermediate
    m.o_fp8_qdq_(o, 32)        # in place
    return torch.einsum("tgd,grd->tgr", o, w)
def g(o):                      # in place on a graph input
    m.o_fp8_qdq_(o, 32, emulate=True)
    return o
gen = torch.Generator(device="cuda").manual_seed(0)
ok = True
for T in (1, 37, 300):
    x = (torch.randn(T, 8, 4096, device="cuda", generator=gen) * 4).bfloat16()
    w = torch.randn(8, 64, 4096, device="cuda", generator=gen).bfloat16()
    ref = f(x.clone(), w); refg = g(x.clone())
    for backend in ("eager", "aot_eager", "inductor"):
        torch._dynamo.reset()
        try:
            y = torch.compile(f, fullgraph=True, backend=backend)(x.clone(), w)
            xi = x.clone(); yg = torch.compile(g, fullgraph=True, backend=backend)(xi)
            eq = torch.equal(y, ref) and torch.equal(yg, refg) and torch.equal(xi, refg)
            ok &= eq
            print(f"T={T} {backend}: traced fullgraph, equal to eager: {eq}")
        except Exception as e:
            ok = False
            print(f"T={T} {backend}: FAIL {type(e).__name__}: {str(e)[:1500]}")
print("ALL OK" if ok else "SOME FAILED")

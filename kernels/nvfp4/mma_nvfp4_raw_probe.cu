// Compile probe, no DeepGEMM tree needed: the NVFP4 block-scaled MMA as raw inline PTX.
//
// `tcgen05.mma.cta_group::{1,2}.kind::mxf4nvf4.block_scale.scale_vec::4X` is accepted by ptxas only
// on arch-specific targets (sm_100a, sm_103a, sm_110a); nvcc 13.0 rejects it for the family targets
// ('.scale_vec::4X' not supported), sm_100 and sm_90a (no tcgen05.mma at all). tests/kernels/
// test_nvfp4_ptx_rule.py compiles this file, and a copy spelled `.block16`, for each of those targets and
// reads the SASS. Nothing here is ever launched.
#include <cstdint>

extern "C" __global__ void nvfp4_mma_probe_1cta(uint32_t tmem_c, uint64_t desc_a, uint64_t desc_b,
                                                uint32_t idesc, uint32_t tmem_sfa, uint32_t tmem_sfb,
                                                uint32_t accumulate) {
    asm volatile(
        "{\n\t"
        ".reg .pred p;\n\t"
        "setp.ne.b32 p, %4, 0;\n\t"
        "tcgen05.mma.cta_group::1.kind::mxf4nvf4.block_scale.scale_vec::4X [%0], %1, %2, %3, [%5], [%6], p;\n\t"
        "}\n"
        :: "r"(tmem_c), "l"(desc_a), "l"(desc_b), "r"(idesc), "r"(accumulate), "r"(tmem_sfa), "r"(tmem_sfb));
}

extern "C" __global__ void nvfp4_mma_probe_2cta(uint32_t tmem_c, uint64_t desc_a, uint64_t desc_b,
                                                uint32_t idesc, uint32_t tmem_sfa, uint32_t tmem_sfb,
                                                uint32_t accumulate) {
    asm volatile(
        "{\n\t"
        ".reg .pred p;\n\t"
        "setp.ne.b32 p, %4, 0;\n\t"
        "tcgen05.mma.cta_group::2.kind::mxf4nvf4.block_scale.scale_vec::4X [%0], %1, %2, %3, [%5], [%6], p;\n\t"
        "}\n"
        :: "r"(tmem_c), "l"(desc_a), "l"(desc_b), "r"(idesc), "r"(accumulate), "r"(tmem_sfa), "r"(tmem_sfb));
}

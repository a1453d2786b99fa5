// Compile probe through the patched DeepGEMM headers (patches/deepgemm, "Add NVFP4 MMA kind ...").
//
// Compiled (never launched) by tests/regress/deepgemm/test_nvfp4_mma_compile.py with
//   nvcc -std=c++20 -cubin -I<tree>/deep_gemm/include -I<cutlass>/include -arch=<target>
// sm_100a must build and its SASS must hold the 4X block-scaled UMMA (UTCOMMA.4X / UTCOMMA.2CTA.4X);
// sm_100f, sm_100 and sm_90a must be rejected (the wrappers' static_assert on the device pass, ptxas
// behind it). Built with -DDSV4_PROBE_HOST_MAIN it also links a host main() that prints the instruction
// descriptors, which the test decodes bit by bit (runs on any x86 host, no GPU).
#include <cstdint>

#include <deep_gemm/common/types.cuh>
#include <deep_gemm/mma/sm100.cuh>
#include <deep_gemm/ptx/tcgen05.cuh>

using deep_gemm::MmaKind;

// The kind is its own enumerator, not MXFP8FP4 with another name
static_assert(static_cast<int>(MmaKind::NVFP4) != static_cast<int>(MmaKind::MXFP8FP4), "NVFP4 aliases MXFP8FP4");
static_assert(deep_gemm::get_element_bits(MmaKind::NVFP4) == 4, "E2M1 stays packed two per byte");
static_assert(deep_gemm::get_element_bits(MmaKind::MXFP8FP4) == 8 and deep_gemm::get_element_size(MmaKind::MXFP8FP4) == 1,
              "MXFP8FP4 element size changed");
static_assert(deep_gemm::get_element_size(MmaKind::BF16) == 2, "BF16 element size changed");
static_assert(deep_gemm::get_sf_block_size(MmaKind::NVFP4) == 16, "NVFP4 scales 16 values");
static_assert(deep_gemm::get_num_sf_per_mma(MmaKind::NVFP4) == 4, "NVFP4 MMA is scale_vec::4X");

// The instruction descriptors the probe kernels issue (not constant expressions in CUTLASS: a union)
template <uint32_t UMMA_M, uint32_t UMMA_N>
CUTLASS_HOST_DEVICE cute::UMMA::InstrDescriptorBlockScaled probe_desc() {
    return deep_gemm::mma::sm100::make_nvfp4_instr_desc<UMMA_M, UMMA_N, cute::UMMA::Major::K, cute::UMMA::Major::K>();
}

extern "C" __global__ void nvfp4_mma_probe_1cta(uint32_t tmem_c, uint64_t desc_a, uint64_t desc_b,
                                                uint32_t tmem_sfa, uint32_t tmem_sfb, uint32_t accumulate) {
    const auto desc = deep_gemm::mma::sm100::make_runtime_nvfp4_instr_desc(probe_desc<128, 256>());
    deep_gemm::ptx::SM100_MMA_MXF4NVF4_SS::fma(desc_a, desc_b, tmem_c, accumulate, desc, tmem_sfa, tmem_sfb);
}

extern "C" __global__ void nvfp4_mma_probe_2cta(uint32_t tmem_c, uint64_t desc_a, uint64_t desc_b,
                                                uint32_t tmem_sfa, uint32_t tmem_sfb, uint32_t accumulate) {
    const auto desc = deep_gemm::mma::sm100::make_runtime_nvfp4_instr_desc(probe_desc<256, 256>());
    deep_gemm::ptx::SM100_MMA_MXF4NVF4_2x1SM_SS::fma(desc_a, desc_b, tmem_c, accumulate, desc, tmem_sfa, tmem_sfb);
}

#ifdef DSV4_PROBE_HOST_MAIN
// Host side, no GPU needed: print the 32-bit descriptors so the test can decode them independently
#include <cstdio>

int main() {
    const uint32_t d1 = static_cast<uint32_t>(probe_desc<128, 256>());
    const uint32_t d2 = static_cast<uint32_t>(probe_desc<256, 256>());
    std::printf("desc_1cta=0x%08x\ndesc_2cta=0x%08x\n", d1, d2);
    return 0;
}
#endif

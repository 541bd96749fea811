// Which x86-64 level the CPU kernels run at. The vectorized kernels (GEMM, the elementwise loops, the
// row kernels: softmax, LayerNorm) are compiled twice: for the build's x86-64-v3 baseline (AVX2 +
// FMA), in namespace lockstep::cpu::avx2, and for x86-64-v4 (AVX-512), in lockstep::cpu::avx512; each
// call runs the widest the processor supports (PyTorch's CPU kernels choose the same way). Binaries
// stay portable. LOCKSTEP_CPU_ISA=avx2 forces the baseline (for comparisons).
//
// The bfloat16 GEMM (tensor/cpu/gemm_bf16.h) has a third level: AVX512-BF16 (vdpbf16ps, Zen 4, Cooper
// Lake, Sapphire Rapids), its own file compiled with that target. LOCKSTEP_CPU_ISA=avx512 keeps the
// AVX-512 kernels but leaves AVX512-BF16 out, so the bfloat16 GEMM takes its float32 fallback (what
// its tests force); avx2 leaves out both. Above it, AMX tiles (TDPBF16PS, Sapphire Rapids and later)
// where the processor and the kernel allow them (use_amx_bf16); LOCKSTEP_CPU_AMX=0 leaves them out.
//
// A file compiled for both has its kernels between LOCKSTEP_ISA_BEGIN and LOCKSTEP_ISA_END: in
// namespace lockstep::cpu::avx2, or, built with -DLOCKSTEP_ISA_AVX512, in lockstep::cpu::avx512 with
// AVX-512 enabled for that code alone (a target pragma, not -march). Whatever such a file
// instantiates from headers it included before LOCKSTEP_ISA_BEGIN (fail(), dispatch(), the op
// functors, std::) is compiled for the baseline, so when the linker keeps one copy of such a
// template it cannot be an AVX-512 one, which would then run on a processor without AVX-512; the op
// functors and math:: functions are still inlined into, and vectorized with, the AVX-512 loops. So:
// include every header (standard ones too) before LOCKSTEP_ISA_BEGIN.
#if defined(LOCKSTEP_ISA_AVX512)
#define LOCKSTEP_ISA_NAMESPACE avx512
#define LOCKSTEP_ISA_BEGIN                                                                    \
  _Pragma("GCC push_options")                                                                 \
  _Pragma("GCC target(\"avx512f,avx512bw,avx512dq,avx512vl,avx512cd,prefer-vector-width=512\")") \
  namespace lockstep::cpu::avx512 {
#define LOCKSTEP_ISA_END } _Pragma("GCC pop_options")
#else
#define LOCKSTEP_ISA_NAMESPACE avx2
#define LOCKSTEP_ISA_BEGIN namespace lockstep::cpu::avx2 {
#define LOCKSTEP_ISA_END }
#endif

namespace lockstep::cpu {

// True when the processor has AVX-512 (F, BW, DQ, VL, CD) and LOCKSTEP_CPU_ISA is not "avx2".
bool use_avx512();
// "avx512" or "avx2": the kernels that run.
const char* isa_name();
// True when use_avx512() and the processor has AVX512-BF16, unless LOCKSTEP_CPU_ISA is "avx512".
bool use_avx512_bf16();
// True when the processor has AMX-BF16 tiles (TDPBF16PS).
bool has_amx_bf16();
// True when use_avx512_bf16(), has_amx_bf16(), LOCKSTEP_CPU_AMX is not "0", and Linux has granted this
// process the tile data state (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), asked once here).
bool use_amx_bf16();

}  // namespace lockstep::cpu

// fn(args...) from the avx512 or the avx2 build of a kernel file.
#define LOCKSTEP_CPU_ISA_CALL(fn, ...)                                                      \
  (::lockstep::cpu::use_avx512() ? ::lockstep::cpu::avx512::fn(__VA_ARGS__) \
                                 : ::lockstep::cpu::avx2::fn(__VA_ARGS__))

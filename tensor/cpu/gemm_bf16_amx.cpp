// bfloat16 GEMM with float32 accumulation on AMX tiles (TDPBF16PS; tensor/cpu/gemm_bf16.h): the
// AVX512-BF16 kernel's blocking (gemm_bf16_avx512.cpp) with tiles in place of vector registers.
// - op(B) is packed as that kernel packs it (pack_b: panels of kNR = 64 columns, [pairs][64] in VNNI
//   order), each panel padded with zero pairs to a multiple of 16: a B tile (16 pairs x 16 columns,
//   64-byte rows) is read from the panel in place, one panel row (256 bytes) apart.
// - op(A) is read in place where it is row-major and the block is whole tiles (a row's 32 depths are
//   one 64-byte tile row); otherwise it is copied into a row-major block, zeros past m and k.
// - The micro-kernel keeps a 32 x 32 block of C in four tiles, loads two A tiles and two B tiles per
//   32 depths and issues four TDPBF16PS; the tiles are then stored to a float32 block and written to C
//   with alpha and beta (bfloat16 C rounded once, as the AVX512-BF16 kernel does).
//
// The tile instructions go through a policy: AmxTiles issues them, EmulatedTiles does their arithmetic
// in C++, so that the blocking, the packing and the edges are tested on processors without AMX
// (gemm_bf16_emulated, tests/tensor/gemm_bf16_amx_test.cpp); where AMX is used, gemm.cpp also checks
// its first product against the AVX512-BF16 kernel's.
//
// Compiled for AVX-512 with BF16 and AMX by a target pragma; every header comes first (isa.h says why).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "tensor/cpu/gemm_bf16.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,amx-tile,amx-bf16")

#include "tensor/cpu/pack_bf16.h"  // after the pragma: compiled for its target (pack_bf16.h says why)

namespace lockstep::cpu::amx_bf16 {
namespace {

using avx512_bf16::first_lanes;
using avx512_bf16::pack_b;
using avx512_bf16::store;

constexpr int64_t kNR = 64;          // a packed panel of B: 4 tiles wide
constexpr int64_t kNC = kNR * 24;    // columns of B packed at a time (as the AVX512-BF16 kernel)
constexpr int64_t kKC = 2048;        // depths at a time: a multiple of 32
constexpr int64_t kMC = 128;         // rows of A per block: a multiple of 32
constexpr int64_t kPanelRow = kNR * 4;  // bytes from one pair of a B panel to the next

// The tile configuration (palette 1): eight tiles of 16 rows x 64 bytes. C: tmm0-3 (16 x 16 float32),
// A: tmm4-5 (16 rows x 32 bfloat16), B: tmm6-7 (16 pairs x 16 columns).
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};
static_assert(sizeof(TileConfig) == 64);

// The tile instructions for one thread's product: the configuration is loaded on construction and the
// tiles released after (so the thread's saved state shrinks back).
struct AmxTiles {
  AmxTiles() {
    static const TileConfig config;
    _tile_loadconfig(&config);
  }
  ~AmxTiles() { _tile_release(); }
  AmxTiles(const AmxTiles&) = delete;
  AmxTiles& operator=(const AmxTiles&) = delete;

  void zero() {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
  // C += A B over 32 depths: A's rows 0-15 at a0 and 16-31 at a1 (sa bytes apart), B's columns 0-15 at
  // b0 and 16-31 at b1 (one pair of depths kPanelRow bytes apart).
  void step(const void* a0, const void* a1, int64_t sa, const void* b0, const void* b1) {
    // GCC's tileloadd takes its address as a plain register, not as memory it reads: without this the
    // packing's stores could be moved past the loads.
    asm volatile("" ::: "memory");
    _tile_loadd(4, a0, sa);
    _tile_loadd(5, a1, sa);
    _tile_loadd(6, b0, kPanelRow);
    _tile_loadd(7, b1, kPanelRow);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  // The 32 x 32 float32 block of C into c (row-major, 32 wide).
  void store_c(float* c) {
    _tile_stored(0, c, 128);
    _tile_stored(1, c + 16, 128);
    _tile_stored(2, c + 16 * 32, 128);
    _tile_stored(3, c + 16 * 32 + 16, 128);
  }
};

// TDPBF16PS's arithmetic in C++ (per element, each pair of depths: += a0 b0 + a1 b1 in float32).
struct EmulatedTiles {
  float acc[32][32];

  static float widen(uint16_t h) {
    const uint32_t u = uint32_t(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  void zero() { std::memset(acc, 0, sizeof acc); }
  void step(const void* a0, const void* a1, int64_t sa, const void* b0, const void* b1) {
    for (int ti = 0; ti < 2; ++ti)
      for (int r = 0; r < 16; ++r) {
        const auto* ar = reinterpret_cast<const uint16_t*>(static_cast<const char*>(ti ? a1 : a0) + r * sa);
        for (int tj = 0; tj < 2; ++tj)
          for (int q = 0; q < 16; ++q) {
            const auto* br = reinterpret_cast<const uint32_t*>(static_cast<const char*>(tj ? b1 : b0) + q * kPanelRow);
            for (int col = 0; col < 16; ++col) {
              float& c = acc[ti * 16 + r][tj * 16 + col];
              c += widen(ar[2 * q]) * widen(uint16_t(br[col])) + widen(ar[2 * q + 1]) * widen(uint16_t(br[col] >> 16));
            }
          }
      }
  }
  void store_c(float* c) { std::memcpy(c, acc, sizeof acc); }
};

// op(A)'s block of mc rows from i0 and kc depths from p0, row-major with stride `ld` bfloat16: in place
// where A is [m, k] and the block is whole tiles, else copied into buf (rows up to a multiple of 32,
// depths up to kpp pairs, zeros past mc and kc).
const uint16_t* block_a(bool ta, const uint16_t* a, int64_t lda, int64_t i0, int64_t mc, int64_t p0, int64_t kc,
                        int64_t kpp, std::vector<uint16_t>& buf, int64_t& ld) {
  if (!ta && kc % 32 == 0 && mc % 32 == 0) {
    ld = lda;
    return a + i0 * lda + p0;
  }
  ld = 2 * kpp;
  const int64_t rows = (mc + 31) / 32 * 32;
  buf.resize(size_t(rows * ld));
  for (int64_t i = 0; i < mc; ++i) {
    uint16_t* dst = buf.data() + i * ld;
    if (!ta) std::memcpy(dst, a + (i0 + i) * lda + p0, size_t(kc) * 2);
    else
      for (int64_t p = 0; p < kc; ++p) dst[p] = a[(p0 + p) * lda + i0 + i];
    std::fill(dst + kc, dst + ld, uint16_t(0));  // only the padding is zeroed: the rest was just written
  }
  std::fill(buf.data() + mc * ld, buf.data() + rows * ld, uint16_t(0));
  return buf.data();
}

// One thread's product through Tiles. TC is float (C float32) or uint16_t (C bfloat16).
template <typename Tiles, typename TC>
void run(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a, int64_t lda,
         const uint16_t* b, int64_t ldb, float beta, TC* c, int64_t ldc) {
  thread_local std::vector<uint32_t> pb_buf;
  thread_local std::vector<uint16_t> pa_buf;
  thread_local std::vector<float> scratch;
  constexpr bool kBf16Out = sizeof(TC) == 2;
  const bool use_scratch = kBf16Out && k > kKC;
  const int64_t nc_max = std::min(n, kNC);
  pb_buf.resize(size_t((std::min(k, kKC) + 31) / 32 * 16 * ((nc_max + kNR - 1) / kNR) * kNR));
  if (use_scratch) scratch.resize(size_t(m * nc_max));
  Tiles tiles;
  alignas(64) float block[32 * 32];
  for (int64_t j0 = 0; j0 < n; j0 += kNC) {
    const int64_t nc = std::min(kNC, n - j0);
    for (int64_t p0 = 0; p0 < k; p0 += kKC) {
      const int64_t kc = std::min(kKC, k - p0), kpp = (kc + 31) / 32 * 16;
      const bool first = p0 == 0, last = p0 + kc == k;
      pack_b(tb, tb ? b + j0 * ldb : b + j0, ldb, nc, k, p0, kc, kNR, kpp, pb_buf.data());
      for (int64_t i0 = 0; i0 < m; i0 += kMC) {
        const int64_t mc = std::min(kMC, m - i0);
        int64_t ld = 0;
        const uint16_t* pa = block_a(ta, a, lda, i0, mc, p0, kc, kpp, pa_buf, ld);
        for (int64_t jr = 0; jr < nc; jr += 32) {
          const uint32_t* panel = pb_buf.data() + jr / kNR * kpp * kNR + jr % kNR;
          const int64_t cols = std::min<int64_t>(32, nc - jr);
          for (int64_t ir = 0; ir < mc; ir += 32) {
            const int64_t rows = std::min<int64_t>(32, mc - ir);
            tiles.zero();
            for (int64_t q0 = 0; q0 < kpp; q0 += 16) {
              const uint16_t* a0 = pa + ir * ld + 2 * q0;
              tiles.step(a0, a0 + 16 * ld, ld * 2, panel + q0 * kNR, panel + q0 * kNR + 16);
            }
            tiles.store_c(block);
            // The block into C (or the float32 scratch of a deep bfloat16 product).
            TC* out = c + (i0 + ir) * ldc + j0 + jr;
            float* s = use_scratch ? scratch.data() + (i0 + ir) * nc + jr : nullptr;
            for (int64_t r = 0; r < rows; ++r)
              for (int v = 0; v < 2; ++v) {
                const __mmask16 mk = first_lanes(cols - 16 * v);
                if (!mk) continue;
                const __m512 x = _mm512_load_ps(block + r * 32 + 16 * v);
                if (s) store(x, s + r * nc + 16 * v, mk, 1.f, first ? 0.f : 1.f);
                else store(x, out + r * ldc + 16 * v, mk, alpha, first ? beta : 1.f);
              }
          }
        }
      }
      if (use_scratch && last) {
        // C [m, nc] = round(alpha * scratch + beta * C).
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < nc; j += 16) {
            const __mmask16 mk = first_lanes(nc - j);
            store(_mm512_maskz_loadu_ps(mk, scratch.data() + i * nc + j), c + i * ldc + j0 + j, mk, alpha, beta);
          }
      }
    }
  }
}

template <typename Tiles, typename TC>
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const BFloat16* a, int64_t lda,
          const BFloat16* b, int64_t ldb, float beta, TC* c, int64_t ldc) {
  using Out = std::conditional_t<std::is_same_v<TC, float>, float, uint16_t>;
  run<Tiles>(ta, tb, m, n, k, alpha, reinterpret_cast<const uint16_t*>(a), lda, reinterpret_cast<const uint16_t*>(b),
             ldb, beta, reinterpret_cast<Out*>(c), ldc);
}

}  // namespace

void gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const BFloat16* a, int64_t lda,
               const BFloat16* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  gemm<AmxTiles>(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const BFloat16* a, int64_t lda,
               const BFloat16* b, int64_t ldb, float beta, BFloat16* c, int64_t ldc) {
  gemm<AmxTiles>(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gemm_bf16_emulated(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const BFloat16* a,
                        int64_t lda, const BFloat16* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  gemm<EmulatedTiles>(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void gemm_bf16_emulated(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const BFloat16* a,
                        int64_t lda, const BFloat16* b, int64_t ldb, float beta, BFloat16* c, int64_t ldc) {
  gemm<EmulatedTiles>(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace lockstep::cpu::amx_bf16

#pragma GCC pop_options

// AVX2 + FMA helpers shared by rlvr's CPU kernels built for any x86 CPU torch runs AVX2 kernels on
// (fp32_decode_kernels.cpp here, rlvr/kernels/cpu_fused_layers.cpp): horizontal sums, a vector exp, bf16 loads and
// stores, an argument check. Header-only, for one translation unit per extension.
#pragma once

#include <torch/extension.h>

#include <cstdint>

#include <immintrin.h>

namespace rlvr_avx2 {

inline float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

// exp(x) to ~1e-7 relative: 2^(x log2 e) = 2^n * 2^f, f in [-0.5, 0.5] by a degree-6 polynomial, 2^n built in the
// exponent bits. Inputs below -87 give exp(-87) (~1.6e-38, kept normal); callers zero masked lanes.
inline __m256 exp8(__m256 x) {
  x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.0f)), _mm256_set1_ps(-87.0f));
  const __m256 t = _mm256_mul_ps(x, _mm256_set1_ps(1.4426950408889634f));
  const __m256 n = _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_mul_ps(_mm256_sub_ps(t, n), _mm256_set1_ps(0.6931471805599453f));
  __m256 p = _mm256_set1_ps(1.0f / 720.0f);
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
  const __m256i scale = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(scale));
}

inline float exp1(float x) { return _mm256_cvtss_f32(exp8(_mm256_set1_ps(x))); }

// 8 lanes of fp32 from fp32 or bf16 memory, and back. bf16 -> fp32 is exact (the bf16 bits are the top half of the
// fp32 bits); fp32 -> bf16 rounds to nearest even with NaN kept a quiet NaN, as torch's conversion does.
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) {
  const __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16));
}
inline void store8(float* p, __m256 x) { _mm256_storeu_ps(p, x); }
inline void store8(uint16_t* p, __m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i top = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF))), 16);
  const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  top = _mm256_blendv_epi8(top, _mm256_set1_epi32(0x7FC0), _mm256_castps_si256(nan));
  const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(top), _mm256_extracti128_si256(top, 1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), packed);
}

// one value, for the tails of rows whose length is not a multiple of 8
inline float load1(const float* p) { return *p; }
inline float load1(const uint16_t* p) { return static_cast<float>(at::BFloat16(*p, at::BFloat16::from_bits())); }
inline void store1(float* p, float x) { *p = x; }
inline void store1(uint16_t* p, float x) { *p = at::BFloat16(x).x; }

inline void check_fp32(const torch::Tensor& t, const char* name, int64_t dims) {
  TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == at::kFloat && t.dim() == dims && t.is_contiguous(), name,
              ": expected a contiguous ", dims, "-d fp32 CPU tensor, got ", t.scalar_type(), " of shape ", t.sizes(),
              t.is_contiguous() ? "" : " (not contiguous)");
}

}  // namespace rlvr_avx2

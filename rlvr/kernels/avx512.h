// AVX-512 helpers shared by rlvr's CPU kernels (decode_kernels.cpp here, rlvr/kernels/cpu_logprobs.cpp): bf16 loads
// and stores, a vector exp, raw pointers and argument checks. Header-only, for one translation unit per extension.
#pragma once

#include <torch/extension.h>

#include <cstdint>

#include <immintrin.h>

namespace rlvr_avx512 {

using bf16 = at::BFloat16;

// 16 lanes at a time (AVX-512). bf16 -> fp32 is exact (the bf16 bits are the top half of the fp32 bits); fp32 -> bf16
// rounds to nearest even, as torch does (NaN payloads aside).
inline __m512 load16(const uint16_t* p, __mmask16 m = 0xFFFF) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}
inline __m512i rounded_bits(__m512 x) {  // the fp32 bits of x rounded to bf16, in the top half
  const __m512i u = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  return _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF)));
}
inline __m512 round16(__m512 x) {  // x rounded to bf16, as fp32
  return _mm512_castsi512_ps(_mm512_and_si512(rounded_bits(x), _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
}
inline void store16(uint16_t* p, __m512 x, __mmask16 m = 0xFFFF) {
  _mm256_mask_storeu_epi16(p, m, _mm512_cvtepi32_epi16(_mm512_srli_epi32(rounded_bits(x), 16)));
}
inline float to_float(uint16_t bits) { return static_cast<float>(bf16(bits, bf16::from_bits())); }  // one value
inline uint16_t to_bf16_bits(float v) { return bf16(v).x; }  // rounded to nearest even

inline __mmask16 tail_mask(int64_t count) {  // the first min(count, 16) lanes
  return count >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << count) - 1u);
}

// exp(x) to ~1e-7 relative: 2^(x log2 e) = 2^n * 2^f, f in [-0.5, 0.5] by a degree-6 polynomial, 2^n by scalef.
// Inputs below -87 give exp(-87) (~1.6e-38, kept normal to avoid denormal slowdowns); callers zero masked lanes.
inline __m512 exp16(__m512 x) {
  x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(88.0f)), _mm512_set1_ps(-87.0f));
  const __m512 t = _mm512_mul_ps(x, _mm512_set1_ps(1.4426950408889634f));
  const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_mul_ps(_mm512_sub_ps(t, n), _mm512_set1_ps(0.6931471805599453f));  // e^f, |f| <= ln2/2
  __m512 p = _mm512_set1_ps(1.0f / 720.0f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

inline const uint16_t* raw(const torch::Tensor& t) { return reinterpret_cast<const uint16_t*>(t.data_ptr<bf16>()); }
inline uint16_t* raw_mut(torch::Tensor& t) { return reinterpret_cast<uint16_t*>(t.data_ptr<bf16>()); }

inline void check_bf16(const torch::Tensor& t, const char* name, int64_t dims) {
  TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == at::kBFloat16 && t.is_contiguous() && t.dim() == dims,
              name, ": expected a contiguous ", dims, "-d bf16 CPU tensor, got ", t.scalar_type(), " of shape ",
              t.sizes(), t.is_contiguous() ? "" : " (not contiguous)");
}

}  // namespace rlvr_avx512

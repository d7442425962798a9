// Fused CPU kernels for one decode step of a Llama-style decoder in bf16 (rlvr/rollout/fused_decode.py).
//
// Decoding 16 rows, every element-wise op of a layer is a few microseconds of dispatch for a few microseconds of
// work, and transformers runs ~200 of them a layer (RMSNorm alone is 7). Each function here is one pass over its
// operands, rounding to bf16 exactly where transformers' bf16 modules round, so its outputs match theirs up to the
// order of a sum. Shapes: R rows, D hidden size, H query heads, Hk KV heads, G = H / Hk, d head size, C cache
// capacity (positions), L filled positions.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include <immintrin.h>

namespace {

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

const uint16_t* raw(const torch::Tensor& t) { return reinterpret_cast<const uint16_t*>(t.data_ptr<bf16>()); }
uint16_t* raw_mut(torch::Tensor& t) { return reinterpret_cast<uint16_t*>(t.data_ptr<bf16>()); }

void check_bf16(const torch::Tensor& t, const char* name, int64_t dims) {
  TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == at::kBFloat16 && t.is_contiguous() && t.dim() == dims,
              name, ": expected a contiguous ", dims, "-d bf16 CPU tensor, got ", t.scalar_type(), " of shape ",
              t.sizes(), t.is_contiguous() ? "" : " (not contiguous)");
}

// hidden (R, D) bf16, updated in place to bf16(hidden + delta) when delta is given (the residual add); returns
// RMSNorm(hidden) * weight as transformers' LlamaRMSNorm computes it in bf16: fp32 normalisation, rounded to bf16,
// times the bf16 weight, rounded.
torch::Tensor add_rms_norm(torch::Tensor hidden, c10::optional<torch::Tensor> delta, torch::Tensor weight,
                           double eps) {
  check_bf16(hidden, "hidden", 2);
  check_bf16(weight, "weight", 1);
  const int64_t rows = hidden.size(0), dim = hidden.size(1);
  TORCH_CHECK(weight.size(0) == dim, "weight: expected ", dim, " entries, got ", weight.size(0));
  const uint16_t* delta_ptr = nullptr;
  if (delta.has_value()) {
    check_bf16(*delta, "delta", 2);
    TORCH_CHECK(delta->sizes() == hidden.sizes(), "delta: expected shape ", hidden.sizes(), ", got ",
                delta->sizes());
    delta_ptr = raw(*delta);
  }
  auto out = torch::empty_like(hidden);
  uint16_t* h_ptr = raw_mut(hidden);
  const uint16_t* w_ptr = raw(weight);
  uint16_t* o_ptr = raw_mut(out);
  at::parallel_for(0, rows, std::max<int64_t>(1, 32768 / dim), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      uint16_t* h = h_ptr + r * dim;
      __m512 sum_sq = _mm512_setzero_ps();
      for (int64_t i = 0; i < dim; i += 16) {
        const __mmask16 m = tail_mask(dim - i);
        __m512 v = load16(h + i, m);
        if (delta_ptr != nullptr) {
          v = round16(_mm512_add_ps(v, load16(delta_ptr + r * dim + i, m)));
          store16(h + i, v, m);
        }
        sum_sq = _mm512_fmadd_ps(v, v, sum_sq);
      }
      const float inv_rms =
          1.0f / std::sqrt(_mm512_reduce_add_ps(sum_sq) / static_cast<float>(dim) + static_cast<float>(eps));
      const __m512 scale = _mm512_set1_ps(inv_rms);
      for (int64_t i = 0; i < dim; i += 16) {
        const __mmask16 m = tail_mask(dim - i);
        const __m512 normed = round16(_mm512_mul_ps(load16(h + i, m), scale));
        store16(o_ptr + r * dim + i, _mm512_mul_ps(load16(w_ptr + i, m), normed), m);
      }
    }
  });
  return out;
}

// qkv (R, (H + 2 Hk) d) bf16: one row's queries, keys, values side by side (the fused projection's output).
// Applies RoPE to queries and keys as transformers' apply_rotary_pos_emb does in bf16 (q * cos and
// rotate_half(q) * sin each rounded, then their sum), writes the rotated keys to column `column` of
// keys_t (R, Hk, C / 16, d, 16) (keys transposed in blocks of 16 positions: dimension i of 16 consecutive positions
// side by side, one 2 KB block per 16 positions at d = 64) and the values to row `column` of
// values (R, Hk, C, d). cos, sin: (P, d) bf16 tables; positions (R,) int64 rows of them. Returns the queries
// (R, H, d) bf16.
torch::Tensor rope_and_cache(torch::Tensor qkv, torch::Tensor cos, torch::Tensor sin, torch::Tensor positions,
                             torch::Tensor keys_t, torch::Tensor values, int64_t column, int64_t heads) {
  check_bf16(qkv, "qkv", 2);
  check_bf16(cos, "cos", 2);
  check_bf16(sin, "sin", 2);
  check_bf16(keys_t, "keys_t", 5);
  check_bf16(values, "values", 4);
  TORCH_CHECK(positions.scalar_type() == at::kLong && positions.is_contiguous() && positions.dim() == 1,
              "positions: expected a contiguous 1-d int64 tensor");
  TORCH_CHECK(keys_t.size(4) == 16, "keys_t: expected blocks of 16 positions, got ", keys_t.sizes());
  const int64_t rows = qkv.size(0), kv_heads = keys_t.size(1), head_dim = keys_t.size(3),
                capacity = keys_t.size(2) * 16;
  TORCH_CHECK(qkv.size(1) == (heads + 2 * kv_heads) * head_dim, "qkv: expected ", (heads + 2 * kv_heads) * head_dim,
              " columns, got ", qkv.size(1));
  TORCH_CHECK(keys_t.size(0) == rows && positions.size(0) == rows, "keys_t, positions: expected ", rows, " rows");
  TORCH_CHECK(values.size(0) == rows && values.size(1) == kv_heads && values.size(2) == capacity &&
                  values.size(3) == head_dim, "values: expected shape (", rows, ", ", kv_heads, ", ", capacity, ", ",
              head_dim, "), got ", values.sizes());
  TORCH_CHECK(column >= 0 && column < capacity, "column ", column, " outside the cache capacity ", capacity);
  TORCH_CHECK(cos.sizes() == sin.sizes() && cos.size(1) == head_dim, "cos, sin: expected (positions, ", head_dim,
              ") tables");
  TORCH_CHECK(head_dim % 2 == 0, "head size must be even, got ", head_dim);
  const int64_t* pos_ptr = positions.data_ptr<int64_t>();
  for (int64_t r = 0; r < rows; ++r)
    TORCH_CHECK(pos_ptr[r] >= 0 && pos_ptr[r] < cos.size(0), "position ", pos_ptr[r], " outside the RoPE table of ",
                cos.size(0));
  auto queries = torch::empty({rows, heads, head_dim}, qkv.options());
  const int64_t half = head_dim / 2, width = qkv.size(1);
  const uint16_t* qkv_ptr = raw(qkv);
  const uint16_t* cos_ptr = raw(cos);
  const uint16_t* sin_ptr = raw(sin);
  uint16_t* q_out = raw_mut(queries);
  uint16_t* k_ptr = raw_mut(keys_t);
  uint16_t* v_ptr = raw_mut(values);
  const auto f32 = [](uint16_t bits) { return static_cast<float>(c10::BFloat16(bits, c10::BFloat16::from_bits())); };
  const auto to_bits = [](float v) { return c10::BFloat16(v).x; };
  const auto round_f = [&](float v) { return f32(to_bits(v)); };
  const bool vector_halves = half % 16 == 0;
  // one head: x (d) -> out (d), bf16(bf16(x * cos) + bf16(rotate_half(x) * sin)), rotate_half(x) = (-x2, x1)
  auto rotate = [&](const uint16_t* x, const uint16_t* c, const uint16_t* s, uint16_t* out) {
    if (vector_halves) {
      for (int64_t i = 0; i < head_dim; i += 16) {
        const __m512 xv = load16(x + i);
        const __m512 partner = i < half ? _mm512_sub_ps(_mm512_setzero_ps(), load16(x + i + half)) : load16(x + i - half);
        store16(out + i, _mm512_add_ps(round16(_mm512_mul_ps(xv, load16(c + i))),
                                       round16(_mm512_mul_ps(partner, load16(s + i)))));
      }
      return;
    }
    for (int64_t i = 0; i < head_dim; ++i) {
      const float rotated = i < half ? -f32(x[i + half]) : f32(x[i - half]);
      out[i] = to_bits(round_f(f32(x[i]) * f32(c[i])) + round_f(rotated * f32(s[i])));
    }
  };
  std::vector<uint16_t> rotated_key(head_dim);
  for (int64_t r = 0; r < rows; ++r) {  // (H + 2 Hk) d values a row: too little to split over threads
    const uint16_t* row = qkv_ptr + r * width;
    const uint16_t* c = cos_ptr + pos_ptr[r] * head_dim;
    const uint16_t* s = sin_ptr + pos_ptr[r] * head_dim;
    for (int64_t h = 0; h < heads; ++h) rotate(row + h * head_dim, c, s, q_out + (r * heads + h) * head_dim);
    for (int64_t h = 0; h < kv_heads; ++h) {
      rotate(row + (heads + h) * head_dim, c, s, rotated_key.data());
      uint16_t* key_column = k_ptr + ((r * kv_heads + h) * capacity + column / 16 * 16) * head_dim + column % 16;
      for (int64_t i = 0; i < head_dim; ++i) key_column[i * 16] = rotated_key[i];
      std::memcpy(v_ptr + ((r * kv_heads + h) * capacity + column) * head_dim,
                  row + (heads + kv_heads + h) * head_dim, head_dim * sizeof(uint16_t));
    }
  }
  return queries;
}

// One (row, KV head) of decode_attention for G query heads (a compile-time G keeps the accumulators in registers).
template <int G>
void attend(const uint16_t* q, const uint16_t* kt, const uint16_t* v, const float* bias, int64_t length,
            int64_t head_dim, float scale, float* scores, float* q_scaled, uint16_t* out) {
  // the queries in fp32, pre-scaled, laid out (d, G): dimension i of every query head side by side
  for (int g = 0; g < G; ++g)
    for (int64_t i = 0; i < head_dim; ++i)
      q_scaled[i * G + g] = static_cast<float>(c10::BFloat16(q[g * head_dim + i], c10::BFloat16::from_bits())) * scale;
  // scores (G, L): a block of 16 positions at a time, summing over the head dimension (a row of 16 per dimension)
  for (int64_t j = 0; j < length; j += 16) {
    const __mmask16 m = tail_mask(length - j);
    const uint16_t* block = kt + j * head_dim;
    __m512 acc[G];
    for (int g = 0; g < G; ++g) acc[g] = _mm512_setzero_ps();
    for (int64_t i = 0; i < head_dim; ++i) {
      const __m512 k = load16(block + i * 16, m);
      for (int g = 0; g < G; ++g) acc[g] = _mm512_fmadd_ps(_mm512_set1_ps(q_scaled[i * G + g]), k, acc[g]);
    }
    const __m512 b = _mm512_maskz_loadu_ps(m, bias + j);
    for (int g = 0; g < G; ++g) _mm512_mask_storeu_ps(scores + g * length + j, m, _mm512_add_ps(acc[g], b));
  }
  // softmax over the L positions of each query head; masked positions (bias -inf) get exactly 0
  for (int g = 0; g < G; ++g) {
    float* s = scores + g * length;
    __m512 top = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    for (int64_t j = 0; j < length; j += 16) top = _mm512_mask_max_ps(top, tail_mask(length - j), top,
                                                                      _mm512_loadu_ps(s + j));
    const __m512 top_v = _mm512_set1_ps(_mm512_reduce_max_ps(top));
    __m512 total = _mm512_setzero_ps();
    for (int64_t j = 0; j < length; j += 16) {
      const __mmask16 m = tail_mask(length - j);
      const __m512 x = _mm512_maskz_loadu_ps(m, s + j);
      const __mmask16 live = _mm512_mask_cmp_ps_mask(m, x, _mm512_set1_ps(-std::numeric_limits<float>::infinity()),
                                                     _CMP_GT_OQ);
      const __m512 p = _mm512_maskz_mov_ps(live, exp16(_mm512_sub_ps(x, top_v)));
      _mm512_mask_storeu_ps(s + j, m, p);
      total = _mm512_add_ps(total, p);
    }
    const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(total));
    for (int64_t j = 0; j < length; j += 16) {
      const __mmask16 m = tail_mask(length - j);
      _mm512_mask_storeu_ps(s + j, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, s + j), inv));
    }
  }
  // out (G, d) = probabilities (G, L) @ values (L, d), 16 dimensions at a time
  for (int64_t c = 0; c < head_dim; c += 16) {
    const __mmask16 m = tail_mask(head_dim - c);
    __m512 acc[G];
    for (int g = 0; g < G; ++g) acc[g] = _mm512_setzero_ps();
    for (int64_t j = 0; j < length; ++j) {
      if (bias[j] == -std::numeric_limits<float>::infinity()) continue;
      const __m512 x = load16(v + j * head_dim + c, m);
      for (int g = 0; g < G; ++g) acc[g] = _mm512_fmadd_ps(_mm512_set1_ps(scores[g * length + j]), x, acc[g]);
    }
    for (int g = 0; g < G; ++g) store16(out + g * head_dim + c, acc[g], m);
  }
}

using AttendFn = void (*)(const uint16_t*, const uint16_t*, const uint16_t*, const float*, int64_t, int64_t, float,
                          float*, float*, uint16_t*);
constexpr int MAX_GROUPS = 8;
AttendFn attend_for(int64_t groups) {
  static const AttendFn table[MAX_GROUPS] = {attend<1>, attend<2>, attend<3>, attend<4>,
                                              attend<5>, attend<6>, attend<7>, attend<8>};
  return table[groups - 1];
}

// Attention of one new query token per row over the first `length` cached positions, query head h reading KV head
// h / G (transformers' grouping); key_bias (R, C) fp32 is added to the scaled scores (0, or -inf for left padding,
// whose weight is then exactly 0). Scores, softmax and the weighted sum of values in fp32, the output rounded to
// bf16: (R, H d), the layout o_proj takes.
torch::Tensor decode_attention(torch::Tensor queries, torch::Tensor keys_t, torch::Tensor values,
                               torch::Tensor key_bias, int64_t length, double scale) {
  check_bf16(queries, "queries", 3);
  check_bf16(keys_t, "keys_t", 5);
  check_bf16(values, "values", 4);
  const int64_t rows = queries.size(0), heads = queries.size(1), head_dim = queries.size(2);
  const int64_t kv_heads = keys_t.size(1), capacity = keys_t.size(2) * 16;
  TORCH_CHECK(kv_heads > 0 && heads % kv_heads == 0, "query heads ", heads, " not a multiple of KV heads ", kv_heads);
  const int64_t groups = heads / kv_heads;
  TORCH_CHECK(groups <= MAX_GROUPS, "at most ", MAX_GROUPS, " query heads per KV head, got ", groups);
  TORCH_CHECK(keys_t.size(0) == rows && keys_t.size(3) == head_dim && keys_t.size(4) == 16, "keys_t: expected (", rows,
              ", Hk, C / 16, ", head_dim, ", 16), got ", keys_t.sizes());
  TORCH_CHECK(values.size(0) == rows && values.size(1) == kv_heads && values.size(2) == capacity &&
                  values.size(3) == head_dim, "values: expected shape (", rows, ", ", kv_heads, ", ", capacity, ", ",
              head_dim, "), got ", values.sizes());
  TORCH_CHECK(key_bias.scalar_type() == at::kFloat && key_bias.is_contiguous() && key_bias.dim() == 2 &&
                  key_bias.size(0) == rows && key_bias.size(1) == capacity,
              "key_bias: expected a contiguous (", rows, ", ", capacity, ") fp32 tensor");
  TORCH_CHECK(length >= 1 && length <= capacity, "length ", length, " outside [1, ", capacity, "]");
  auto out = torch::empty({rows, heads * head_dim}, queries.options());
  const uint16_t* q_ptr = raw(queries);
  const uint16_t* k_ptr = raw(keys_t);
  const uint16_t* v_ptr = raw(values);
  const float* b_ptr = key_bias.data_ptr<float>();
  uint16_t* o_ptr = raw_mut(out);
  const AttendFn fn = attend_for(groups);
  at::parallel_for(0, rows * kv_heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(groups * length), q_scaled(groups * head_dim);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t r = task / kv_heads, hk = task % kv_heads;
      fn(q_ptr + (r * heads + hk * groups) * head_dim, k_ptr + (r * kv_heads + hk) * head_dim * capacity,
         v_ptr + (r * kv_heads + hk) * capacity * head_dim, b_ptr + r * capacity, length, head_dim,
         static_cast<float>(scale), scores.data(), q_scaled.data(), o_ptr + r * heads * head_dim + hk * groups * head_dim);
    }
  });
  return out;
}

// gate_up (R, 2 I) bf16, the gate and up projections side by side -> (R, I) bf16 silu(gate) * up, rounded as
// transformers' bf16 MLP rounds (silu's output, then the product).
torch::Tensor silu_mul(torch::Tensor gate_up) {
  check_bf16(gate_up, "gate_up", 2);
  TORCH_CHECK(gate_up.size(1) % 2 == 0, "gate_up: expected an even column count, got ", gate_up.size(1));
  const int64_t rows = gate_up.size(0), inner = gate_up.size(1) / 2;
  auto out = torch::empty({rows, inner}, gate_up.options());
  const uint16_t* in_ptr = raw(gate_up);
  uint16_t* o_ptr = raw_mut(out);
  const __m512 one = _mm512_set1_ps(1.0f);
  at::parallel_for(0, rows, std::max<int64_t>(1, 32768 / inner), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const uint16_t* gate = in_ptr + r * 2 * inner;
      for (int64_t i = 0; i < inner; i += 16) {
        const __mmask16 m = tail_mask(inner - i);
        const __m512 x = load16(gate + i, m);
        const __m512 silu = round16(_mm512_div_ps(x, _mm512_add_ps(one, exp16(_mm512_sub_ps(_mm512_setzero_ps(), x)))));
        store16(o_ptr + r * inner + i, _mm512_mul_ps(silu, load16(gate + inner + i, m)), m);
      }
    }
  });
  return out;
}

// One draw per row from softmax(logits / temperature) by inverting its CDF at uniforms (R,) float64 in [0, 1), as
// rlvr.rollout.decode.sample_categorical does (the running sum in float64), and the drawn token's log-prob.
// logits (R, V) bf16. Returns (tokens (R,) int64, logprobs (R,) fp32).
std::vector<torch::Tensor> sample_tokens(torch::Tensor logits, double temperature, torch::Tensor uniforms) {
  check_bf16(logits, "logits", 2);
  TORCH_CHECK(temperature > 0.0, "temperature must be > 0, got ", temperature);
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  TORCH_CHECK(uniforms.scalar_type() == at::kDouble && uniforms.is_contiguous() && uniforms.numel() == rows,
              "uniforms: expected ", rows, " contiguous float64 values");
  auto tokens = torch::empty({rows}, logits.options().dtype(at::kLong));
  auto logprobs = torch::empty({rows}, logits.options().dtype(at::kFloat));
  const uint16_t* l_ptr = raw(logits);
  const double* u_ptr = uniforms.data_ptr<double>();
  int64_t* t_ptr = tokens.data_ptr<int64_t>();
  float* lp_ptr = logprobs.data_ptr<float>();
  const __m512 temp = _mm512_set1_ps(static_cast<float>(temperature));
  at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> probs(vocab);  // exp(x - max), unnormalised
    std::vector<double> chunk_sums((vocab + 15) / 16);
    for (int64_t r = begin; r < end; ++r) {
      const uint16_t* row = l_ptr + r * vocab;
      __m512 top = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
      for (int64_t i = 0; i < vocab; i += 16) {
        const __mmask16 m = tail_mask(vocab - i);
        top = _mm512_mask_max_ps(top, m, top, _mm512_div_ps(load16(row + i, m), temp));
      }
      const float top_s = _mm512_reduce_max_ps(top);
      const __m512 top_v = _mm512_set1_ps(top_s);
      double total = 0.0;
      for (int64_t i = 0, c = 0; i < vocab; i += 16, ++c) {
        const __mmask16 m = tail_mask(vocab - i);
        const __m512 p = _mm512_maskz_mov_ps(m, exp16(_mm512_sub_ps(_mm512_div_ps(load16(row + i, m), temp), top_v)));
        _mm512_mask_storeu_ps(probs.data() + i, m, p);
        chunk_sums[c] = static_cast<double>(_mm512_reduce_add_ps(p));
        total += chunk_sums[c];
      }
      const double target = u_ptr[r] * total;
      double running = 0.0;
      int64_t token = vocab - 1;
      for (int64_t c = 0; c < static_cast<int64_t>(chunk_sums.size()); ++c) {
        if (running + chunk_sums[c] > target) {  // the draw is in this chunk (its last entry if rounding says no)
          token = std::min(vocab, c * 16 + 16) - 1;
          for (int64_t i = c * 16; i < std::min(vocab, c * 16 + 16); ++i) {
            running += probs[i];
            if (running > target) {
              token = i;
              break;
            }
          }
          break;
        }
        running += chunk_sums[c];
      }
      while (token > 0 && probs[token] == 0.0f) --token;  // never a token of probability 0 (a rounding edge)
      t_ptr[r] = token;
      const float x = static_cast<float>(c10::BFloat16(row[token], c10::BFloat16::from_bits())) /
                      static_cast<float>(temperature);
      lp_ptr[r] = x - top_s - static_cast<float>(std::log(total));
    }
  });
  return {tokens, logprobs};
}


}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("add_rms_norm", &add_rms_norm, "residual add + RMSNorm (bf16)", py::arg("hidden"), py::arg("delta"),
        py::arg("weight"), py::arg("eps"));
  m.def("rope_and_cache", &rope_and_cache, "RoPE on queries/keys, keys/values written to the cache (bf16)");
  m.def("decode_attention", &decode_attention, "one-query grouped attention over the cache (bf16)");
  m.def("silu_mul", &silu_mul, "silu(gate) * up (bf16)");
  m.def("sample_tokens", &sample_tokens, "inverse-CDF draws from softmax(logits / T) and their log-probs");
}

// Fused CPU kernels for one decode step of a Llama-style decoder in bf16 (rlvr/kernels/fused_decode.py).
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
#include <sys/syscall.h>
#include <unistd.h>

#include "avx512.h"
#include "decode_common.h"

namespace {

using namespace rlvr_avx512;  // load16, store16, exp16, raw, check_bf16, ... (avx512.h)
using namespace rlvr_decode;  // shape checks, invert_cdf (decode_common.h)

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
  TORCH_CHECK(dim > 0, "hidden: expected a non-empty hidden size");
  // a task per ~4k elements: 16 rows of SmolLM2's 576 take both threads (one task per 32k ran them on one)
  at::parallel_for(0, rows, std::max<int64_t>(1, 4096 / dim), [&](int64_t begin, int64_t end) {
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

// qkv (R, (H + 2 Hk) d) bf16: one row's queries, keys, values side by side (the fused projection's output) ->
// (R, H + 2 Hk, d) bf16, queries and keys rotated as transformers' apply_rotary_pos_emb does in bf16 (q * cos and
// rotate_half(q) * sin each rounded, then their sum), values copied. cos, sin: (P, d) bf16 tables; positions (R,)
// int64 rows of them.
torch::Tensor rope(torch::Tensor qkv, torch::Tensor cos, torch::Tensor sin, torch::Tensor positions, int64_t heads,
                   int64_t kv_heads) {
  check_bf16(qkv, "qkv", 2);
  check_bf16(cos, "cos", 2);
  check_bf16(sin, "sin", 2);
  const int64_t head_dim = check_rope(qkv, cos, sin, positions, heads, kv_heads), half = head_dim / 2;
  const int64_t rows = qkv.size(0), all_heads = heads + 2 * kv_heads;
  const int64_t* pos_ptr = positions.data_ptr<int64_t>();
  auto out = torch::empty({rows, all_heads, head_dim}, qkv.options());
  const uint16_t* qkv_ptr = raw(qkv);
  const uint16_t* cos_ptr = raw(cos);
  const uint16_t* sin_ptr = raw(sin);
  uint16_t* o_ptr = raw_mut(out);
  const auto round_f = [](float v) { return to_float(to_bf16_bits(v)); };
  const bool vector_halves = half % 16 == 0;
  // one head: x (d) -> out (d), bf16(bf16(x * cos) + bf16(rotate_half(x) * sin)), rotate_half(x) = (-x2, x1)
  auto rotate = [&](const uint16_t* x, const uint16_t* c, const uint16_t* s, uint16_t* o) {
    if (vector_halves) {
      for (int64_t i = 0; i < head_dim; i += 16) {
        const __m512 xv = load16(x + i);
        const __m512 partner =
            i < half ? _mm512_sub_ps(_mm512_setzero_ps(), load16(x + i + half)) : load16(x + i - half);
        store16(o + i, _mm512_add_ps(round16(_mm512_mul_ps(xv, load16(c + i))),
                                     round16(_mm512_mul_ps(partner, load16(s + i)))));
      }
      return;
    }
    for (int64_t i = 0; i < head_dim; ++i) {
      const float rotated = i < half ? -to_float(x[i + half]) : to_float(x[i - half]);
      o[i] = to_bf16_bits(round_f(to_float(x[i]) * to_float(c[i])) + round_f(rotated * to_float(s[i])));
    }
  };
  for (int64_t r = 0; r < rows; ++r) {  // (H + 2 Hk) d values a row: too little to split over threads
    const uint16_t* row = qkv_ptr + r * all_heads * head_dim;
    uint16_t* o = o_ptr + r * all_heads * head_dim;
    const uint16_t* c = cos_ptr + pos_ptr[r] * head_dim;
    const uint16_t* s = sin_ptr + pos_ptr[r] * head_dim;
    for (int64_t h = 0; h < heads + kv_heads; ++h) rotate(row + h * head_dim, c, s, o + h * head_dim);
    std::memcpy(o + (heads + kv_heads) * head_dim, row + (heads + kv_heads) * head_dim,
                kv_heads * head_dim * sizeof(uint16_t));
  }
  return out;
}

// A KV cache segment of one (row or prompt, KV head): keys transposed in blocks of 16 positions (C / 16, d, 16),
// values (C, d), `length` positions filled, bias (C) fp32 added to the scaled scores (0, or -inf = never attended).
struct Segment {
  const uint16_t* keys_t;
  const uint16_t* values;
  const float* bias;
  int64_t length;
};

// Scaled scores of G queries (q_scaled (d, G) fp32) over a segment's positions -> scores (G, stride) from column 0.
template <int G>
void segment_scores(const Segment& seg, const float* q_scaled, int64_t head_dim, float* scores, int64_t stride) {
  for (int64_t j = 0; j < seg.length; j += 16) {  // a block of 16 positions: a row of 16 per dimension
    const __mmask16 m = tail_mask(seg.length - j);
    const uint16_t* block = seg.keys_t + j * head_dim;
    __m512 acc[G];
    for (int g = 0; g < G; ++g) acc[g] = _mm512_setzero_ps();
    for (int64_t i = 0; i < head_dim; ++i) {
      const __m512 k = load16(block + i * 16, m);
      for (int g = 0; g < G; ++g) acc[g] = _mm512_fmadd_ps(_mm512_set1_ps(q_scaled[i * G + g]), k, acc[g]);
    }
    const __m512 b = _mm512_maskz_loadu_ps(m, seg.bias + j);
    for (int g = 0; g < G; ++g) _mm512_mask_storeu_ps(scores + g * stride + j, m, _mm512_add_ps(acc[g], b));
  }
}

// out (G, d) fp32 accumulators += probabilities (G, stride, from column 0) @ the segment's values. One pass over the
// positions reads each value row whole (CH chunks of 16 columns at a time: all of d = 64 for G <= 6), so a cold cache
// streams in order once instead of once per chunk; each accumulator still sums its positions in order.
template <int G>
void segment_values(const Segment& seg, const float* probs, int64_t stride, int64_t head_dim, float* acc_out) {
  constexpr int CH = G <= 6 ? 4 : 2;  // G x CH accumulators in registers
  for (int64_t c0 = 0; c0 < head_dim; c0 += CH * 16) {
    __mmask16 m[CH];
    __m512 acc[G][CH];
    for (int ch = 0; ch < CH; ++ch) {
      m[ch] = c0 + ch * 16 < head_dim ? tail_mask(head_dim - c0 - ch * 16) : static_cast<__mmask16>(0);
      for (int g = 0; g < G; ++g) acc[g][ch] = _mm512_maskz_loadu_ps(m[ch], acc_out + g * head_dim + c0 + ch * 16);
    }
    for (int64_t j = 0; j < seg.length; ++j) {
      if (seg.bias[j] == -std::numeric_limits<float>::infinity()) continue;
      const uint16_t* row = seg.values + j * head_dim + c0;
#pragma GCC unroll 4
      for (int ch = 0; ch < CH; ++ch) {
        if (m[ch] == 0) break;
        const __m512 x = load16(row + ch * 16, m[ch]);
        for (int g = 0; g < G; ++g) acc[g][ch] = _mm512_fmadd_ps(_mm512_set1_ps(probs[g * stride + j]), x, acc[g][ch]);
      }
    }
    for (int ch = 0; ch < CH; ++ch)
      for (int g = 0; g < G; ++g) _mm512_mask_storeu_ps(acc_out + g * head_dim + c0 + ch * 16, m[ch], acc[g][ch]);
  }
}

// One (row, KV head) of decode_attention for G query heads over the prompt's segment then the row's own (a
// compile-time G keeps the accumulators in registers). scores: G x (prompt + own) floats, q_scaled G x d, acc G x d.
template <int G>
void attend(const uint16_t* q, const Segment& prompt, const Segment& own, int64_t head_dim, float scale,
            float* scores, float* q_scaled, float* acc, uint16_t* out) {
  for (int g = 0; g < G; ++g)  // the queries in fp32, pre-scaled, laid out (d, G)
    for (int64_t i = 0; i < head_dim; ++i)
      q_scaled[i * G + g] = to_float(q[g * head_dim + i]) * scale;
  const int64_t length = prompt.length + own.length;
  segment_scores<G>(prompt, q_scaled, head_dim, scores, length);
  segment_scores<G>(own, q_scaled, head_dim, scores + prompt.length, length);
  // softmax over all positions of each query head; masked positions (bias -inf) get exactly 0
  for (int g = 0; g < G; ++g) {
    float* s = scores + g * length;
    __m512 top = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    for (int64_t j = 0; j < length; j += 16) {
      const __mmask16 m = tail_mask(length - j);
      top = _mm512_mask_max_ps(top, m, top, _mm512_maskz_loadu_ps(m, s + j));
    }
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
  std::fill(acc, acc + G * head_dim, 0.0f);
  segment_values<G>(prompt, scores, length, head_dim, acc);
  segment_values<G>(own, scores + prompt.length, length, head_dim, acc);
  for (int64_t i = 0; i < G * head_dim; i += 16) {
    const __mmask16 m = tail_mask(G * head_dim - i);
    store16(out + i, _mm512_maskz_loadu_ps(m, acc + i), m);
  }
}

using AttendFn = void (*)(const uint16_t*, const Segment&, const Segment&, int64_t, float, float*, float*, float*,
                          uint16_t*);
constexpr int MAX_GROUPS = 8;
AttendFn attend_for(int64_t groups) {
  static const AttendFn table[MAX_GROUPS] = {attend<1>, attend<2>, attend<3>, attend<4>,
                                              attend<5>, attend<6>, attend<7>, attend<8>};
  return table[groups - 1];
}

void check_cache(const torch::Tensor& keys_t, const torch::Tensor& values, const torch::Tensor& bias,
                 int64_t kv_heads, int64_t head_dim, const char* name) {
  check_bf16(keys_t, name, 5);
  check_bf16(values, name, 4);
  check_cache_shapes(keys_t, values, bias, kv_heads, head_dim, name);
}

// Attention of one new token per row: qkv_rot (A, H + 2 Hk, d) bf16 from rope(), for the rows `rows` (A,) int64,
// increasing, of the cache's R (None: all R, A = R; rows that have ended are left out). Its keys and values are
// first written to position `column` of the row's own cache (own_keys_t (R, Hk, T / 16, d, 16), own_values
// (R, Hk, T, d), own_bias (R, T)); then query head h (reading KV head h / G, transformers' grouping) attends over
// the prompt cache of the row's prompt (row r reads prompt r / (R / U): prompt_keys_t (U, Hk, P / 16, d, 16),
// prompt_values (U, Hk, P, d), prompt_bias (U, P), -inf on left padding, all P positions) and the row's first
// column + 1 positions. A group's samples share one copy of their prompt's keys/values, read once per thread from
// memory. Scores, softmax and the weighted sum of values in fp32, the output rounded to bf16: (A, H d), o_proj's
// input.
torch::Tensor decode_attention(torch::Tensor qkv_rot, torch::Tensor prompt_keys_t, torch::Tensor prompt_values,
                               torch::Tensor prompt_bias, torch::Tensor own_keys_t, torch::Tensor own_values,
                               torch::Tensor own_bias, int64_t column, double scale,
                               c10::optional<torch::Tensor> rows_index) {
  check_bf16(qkv_rot, "qkv_rot", 3);
  check_bf16(own_keys_t, "own keys", 5);
  const int64_t active = qkv_rot.size(0), rows = own_keys_t.size(0), head_dim = qkv_rot.size(2);
  const int64_t kv_heads = own_keys_t.size(1);
  const int64_t heads = check_attention_heads(qkv_rot, kv_heads, MAX_GROUPS), groups = heads / kv_heads;
  check_cache(prompt_keys_t, prompt_values, prompt_bias, kv_heads, head_dim, "prompt");
  check_cache(own_keys_t, own_values, own_bias, kv_heads, head_dim, "own");
  const int64_t prompts = prompt_keys_t.size(0), prompt_len = prompt_values.size(2);
  const int64_t own_capacity = own_values.size(2);
  const std::vector<int64_t> row_of = cache_rows(rows_index, active, rows);  // the cache row of each input row
  const int64_t repeats = samples_per_prompt(rows, prompts, column, own_capacity);
  auto out = torch::empty({active, heads * head_dim}, qkv_rot.options());
  const uint16_t* in_ptr = raw(qkv_rot);
  const uint16_t* pk_ptr = raw(prompt_keys_t);
  const uint16_t* pv_ptr = raw(prompt_values);
  const float* pb_ptr = prompt_bias.data_ptr<float>();
  uint16_t* ok_ptr = raw_mut(own_keys_t);
  uint16_t* ov_ptr = raw_mut(own_values);
  const float* ob_ptr = own_bias.data_ptr<float>();
  uint16_t* o_ptr = raw_mut(out);
  const AttendFn fn = attend_for(groups);
  const int64_t width = (heads + 2 * kv_heads) * head_dim;
  // tasks row-major: a thread's consecutive tasks share a prompt, whose cache then stays in its caches
  at::parallel_for(0, active * kv_heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(groups * (prompt_len + column + 1)), q_scaled(groups * head_dim),
        acc(groups * head_dim);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t a = task / kv_heads, hk = task % kv_heads, r = row_of[a], u = r / repeats;
      uint16_t* own_k = ok_ptr + (r * kv_heads + hk) * own_capacity * head_dim;
      uint16_t* own_v = ov_ptr + (r * kv_heads + hk) * own_capacity * head_dim;
      const uint16_t* new_k = in_ptr + a * width + (heads + hk) * head_dim;
      const uint16_t* new_v = in_ptr + a * width + (heads + kv_heads + hk) * head_dim;
      uint16_t* key_column = own_k + column / 16 * 16 * head_dim + column % 16;
      for (int64_t i = 0; i < head_dim; ++i) key_column[i * 16] = new_k[i];
      std::memcpy(own_v + column * head_dim, new_v, head_dim * sizeof(uint16_t));
      const Segment prompt{pk_ptr + (u * kv_heads + hk) * prompt_len * head_dim,
                           pv_ptr + (u * kv_heads + hk) * prompt_len * head_dim, pb_ptr + u * prompt_len, prompt_len};
      const Segment own{own_k, own_v, ob_ptr + r * own_capacity, column + 1};
      fn(in_ptr + a * width + hk * groups * head_dim, prompt, own, head_dim, static_cast<float>(scale), scores.data(),
         q_scaled.data(), acc.data(), o_ptr + a * heads * head_dim + hk * groups * head_dim);
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
  TORCH_CHECK(inner > 0, "gate_up: expected a non-empty intermediate size");
  // a task per ~4k elements, as add_rms_norm: a few rows of an MLP's width already fill both threads
  at::parallel_for(0, rows, std::max<int64_t>(1, 4096 / inner), [&](int64_t begin, int64_t end) {
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
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  check_sampling(rows, vocab, temperature, uniforms);
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
      const int64_t token = invert_cdf(chunk_sums, probs, vocab, 16, target);
      t_ptr[r] = token;
      const float x = to_float(row[token]) / static_cast<float>(temperature);
      lp_ptr[r] = x - top_s - static_cast<float>(std::log(total));
    }
  });
  return {tokens, logprobs};
}



// ---- GEMM with AMX tiles --------------------------------------------------------------------------------------
// out (M, N) bf16 = x (M, K) bf16 @ W^T + bias, W packed by rlvr.rollout.fused_decode.pack_amx as
// (N' / 64, K / 32, 4, 16, 32) bf16, N' = N rounded up to 64: for each group of 64 output columns and chunk of 32
// inputs, four 16 x 16-column B tiles (16 rows of input pairs), one contiguous 4 KB run, so a thread streams its
// groups' weights strictly in order. Rows in tiles of 16 (an A tile; any row count, e.g. a prefill's, passes over a
// group's weights while they sit in L2), four C tiles of fp32 sums. Decoding 16
// rows, oneDNN's AMX kernel streamed SmolLM2's weights at 7-12 GB/s, this at 14-18 (2 threads): the same tile
// products in the same order, so the outputs are oneDNN's bit for bit (tested).
struct TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {0};
  uint16_t colsb[16] = {0};
  uint8_t rows[16] = {0};
};

bool amx_permitted() {  // Linux asks a process to request the AMX tile state once (oneDNN does the same)
  static const bool ok = syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
  return ok;
}

void configure_tiles(int rows) {  // tiles 0-3: C (rows x 16 fp32), 4: A (rows x 32 bf16), 5-6: B (16 x 32 bf16)
  TileConfig cfg;
  for (int t = 0; t < 5; ++t) {
    cfg.rows[t] = static_cast<uint8_t>(rows);
    cfg.colsb[t] = 64;
  }
  for (int t = 5; t < 7; ++t) {
    cfg.rows[t] = 16;
    cfg.colsb[t] = 64;
  }
  _tile_loadconfig(&cfg);
}

// The arguments of amx_linear and dot_linear: x (M, K) bf16, w_packed in pack_amx's layout for K inputs and n outputs,
// an optional (n,) bf16 bias. Returns the bias's data, or nullptr without one.
const uint16_t* check_packed_linear(const torch::Tensor& x, const torch::Tensor& w_packed,
                                    const c10::optional<torch::Tensor>& bias, int64_t n) {
  check_bf16(x, "x", 2);
  check_bf16(w_packed, "w_packed", 5);
  const int64_t k = x.size(1), groups = w_packed.size(0), chunks = w_packed.size(1);
  TORCH_CHECK(w_packed.size(2) == 4 && w_packed.size(3) == 16 && w_packed.size(4) == 32 && chunks * 32 == k,
              "w_packed: expected (N' / 64, ", k / 32, ", 4, 16, 32) for ", k, " input features, got ",
              w_packed.sizes());
  TORCH_CHECK(n > groups * 64 - 64 && n <= groups * 64, "n = ", n, " does not fit ", groups, " groups of 64");
  if (!bias.has_value()) return nullptr;
  check_bf16(*bias, "bias", 1);
  TORCH_CHECK(bias->size(0) == n, "bias: expected ", n, " entries, got ", bias->size(0));
  return raw(*bias);
}

torch::Tensor amx_linear(torch::Tensor x, torch::Tensor w_packed, c10::optional<torch::Tensor> bias, int64_t n) {
  const uint16_t* b_ptr = check_packed_linear(x, w_packed, bias, n);
  TORCH_CHECK(amx_permitted(), "this process may not use AMX tiles (arch_prctl refused)");
  const int64_t rows = x.size(0), k = x.size(1), groups = w_packed.size(0), chunks = w_packed.size(1);
  auto out = torch::empty({rows, n}, x.options());
  // rows in whole tiles of 16: a last partial tile reads a zero-padded copy (tile loads cannot stop short of 16)
  const int64_t padded_rows = (rows + 15) / 16 * 16;
  torch::Tensor x_tiles = x;
  if (padded_rows != rows) {
    x_tiles = torch::zeros({padded_rows, k}, x.options());
    x_tiles.narrow(0, 0, rows).copy_(x);
  }
  const char* x_ptr = reinterpret_cast<const char*>(raw(x_tiles));
  const char* w_ptr = reinterpret_cast<const char*>(raw(w_packed));
  uint16_t* o_ptr = raw_mut(out);
  at::parallel_for(0, groups, 1, [&](int64_t begin, int64_t end) {
    alignas(64) float sums[16 * 16];
    configure_tiles(16);
    // a group's weights (K / 32 x 4 KB, 72 KB at K = 576) stay in L2 while every row tile passes over them
    for (int64_t g = begin; g < end; ++g) {
      const char* run = w_ptr + g * chunks * 4096;
      for (int64_t r0 = 0; r0 < padded_rows; r0 += 16) {
        const char* a = x_ptr + r0 * k * 2;
        const int chunk_rows = static_cast<int>(std::min<int64_t>(16, rows - r0));
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        for (int64_t c = 0; c < chunks; ++c) {
          const char* b = run + c * 4096;
          if (r0 == 0)
            for (int line = 0; line < 4096; line += 64) _mm_prefetch(b + 8192 + line, _MM_HINT_T0);
          _tile_loadd(4, a + c * 64, k * 2);
          _tile_loadd(5, b, 64);
          _tile_dpbf16ps(0, 4, 5);
          _tile_loadd(6, b + 1024, 64);
          _tile_dpbf16ps(1, 4, 6);
          _tile_loadd(5, b + 2048, 64);
          _tile_dpbf16ps(2, 4, 5);
          _tile_loadd(6, b + 3072, 64);
          _tile_dpbf16ps(3, 4, 6);
        }
        for (int t = 0; t < 4; ++t) {
          const int64_t col = g * 64 + t * 16;
          if (col >= n) break;
          switch (t) {  // tile numbers must be compile-time constants
            case 0: _tile_stored(0, sums, 64); break;
            case 1: _tile_stored(1, sums, 64); break;
            case 2: _tile_stored(2, sums, 64); break;
            default: _tile_stored(3, sums, 64); break;
          }
          const __mmask16 m = tail_mask(n - col);
          const __m512 bias_v = b_ptr != nullptr ? load16(b_ptr + col, m) : _mm512_setzero_ps();
          for (int r = 0; r < chunk_rows; ++r)
            store16(o_ptr + (r0 + r) * n + col, _mm512_add_ps(_mm512_loadu_ps(sums + r * 16), bias_v), m);
        }
      }
    }
    _tile_release();
  });
  return out;
}

// ---- GEMM with AVX512_BF16 dot products (CPUs without AMX) -------------------------------------------------------
// The same product over the same packed layout as amx_linear: row p of a (g, c, t) tile holds input pair
// (32 c + 2 p, + 1) of output columns 64 g + 16 t .. + 15, which is one vdpbf16ps operand against a broadcast pair
// of x. A block of up to 4 rows x the group's 4 tiles keeps 16 fp32 accumulators in registers, reading the group's
// weights from L2. At 16 rows the dot products take about as long as streaming the weights from memory, so the two
// must overlap: while a group's row blocks compute, each prefetches its share of the next group's weights into L2
// (a thread's first group streams itself, prefetched 4 chunks, 16 KB, ahead), a few lines at each input pair
// rather than a chunk's worth at once (whole rollouts, AMD EPYC with AVX512_BF16, 2 threads, 2026-12-08: 0.94x the
// time with bench_vs_trl's 16 rows ending as in a real step, 0.96x with all 16 live, 1.00x at 64 rows); the packs
// lie on 2 MB pages (rlvr/kernels/huge_pages.py), where the read is not cut at every 4 KB page. Decoding 16 rows of
// SmolLM2 on an AMD EPYC (AVX512_BF16, no AMX; 2 threads), a decode step took 29.2 ms against 36.0 ms with oneDNN's
// GEMMs on its own prepacked weights (benchmarks/bench_decode_ab.py, benchmarks/RESULTS.md), before the next-group
// prefetch.
typedef int32_t __attribute__((may_alias)) aliased_i32;

// Rows [0, R) of x against one group's tiles. `stream`: prefetch this group's own chunks ahead (its weights are not
// in L2 yet); `next`: the next group's weights, of which this block prefetches 64-byte lines [lines_from, lines_to) of
// every 4 KB chunk into L2 (nullptr: none), a 16th of them at each of the chunk's 16 input pairs.
template <int R>
void dot_block(const uint16_t* x, int64_t k, const uint16_t* group, int64_t chunks, bool stream, const char* next,
               int lines_from, int lines_to, const uint16_t* bias, uint16_t* out, int64_t n, int64_t col0) {
  __m512 acc[R][4];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int t = 0; t < 4; ++t) acc[r][t] = _mm512_setzero_ps();
  // this block's share of every next chunk: bytes [first, first + span), prefetched a 16th at each input pair
  const int first = lines_from * 64, span = (lines_to - lines_from) * 64;
  for (int64_t c = 0; c < chunks; ++c) {
    const uint16_t* tiles = group + c * 2048;  // 4 tiles of 16 x 32 bf16
    const char* ahead = reinterpret_cast<const char*>(tiles + 4 * 2048);
    const char* next_chunk = next != nullptr ? next + c * 4096 : nullptr;
    const uint16_t* xc = x + c * 32;
#pragma GCC unroll 16
    for (int p = 0; p < 16; ++p) {
      // the prefetches spread over the dot products, not a chunk's worth at once (measured above)
      if (stream)
        for (int line = p * 256; line < p * 256 + 256; line += 64) _mm_prefetch(ahead + line, _MM_HINT_T1);
      if (next_chunk != nullptr)
        for (int line = (first + span * p / 16) & ~63; line < first + span * (p + 1) / 16; line += 64)
          _mm_prefetch(next_chunk + line, _MM_HINT_T1);
      __m512bh w[4];
#pragma GCC unroll 4
      for (int t = 0; t < 4; ++t) w[t] = (__m512bh)_mm512_loadu_si512(tiles + t * 512 + p * 32);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m512bh a = (__m512bh)_mm512_set1_epi32(*reinterpret_cast<const aliased_i32*>(xc + r * k + 2 * p));
#pragma GCC unroll 4
        for (int t = 0; t < 4; ++t) acc[r][t] = _mm512_dpbf16_ps(acc[r][t], a, w[t]);
      }
    }
  }
  for (int t = 0; t < 4; ++t) {
    const int64_t col = col0 + t * 16;
    if (col >= n) break;
    const __mmask16 m = tail_mask(n - col);
    const __m512 bias_v = bias != nullptr ? load16(bias + col, m) : _mm512_setzero_ps();
    for (int r = 0; r < R; ++r) store16(out + r * n + col, _mm512_add_ps(acc[r][t], bias_v), m);
  }
}

// The first weights this thread will read in a dot_linear over `next_packed` with `blocks` row blocks: at::parallel_for
// hands the threads even shares of the tasks in thread order (ATen/ParallelOpenMP.h). nullptr: none for this thread.
const char* next_call_start(const torch::Tensor& next_packed, int64_t blocks) {
  const int64_t tasks = next_packed.size(0) * blocks;
  const int64_t threads = std::min<int64_t>(at::get_num_threads(), tasks);
  const int64_t start = at::get_thread_num() * ((tasks + threads - 1) / threads);
  if (start >= tasks) return nullptr;
  return reinterpret_cast<const char*>(raw(next_packed) + start / blocks * next_packed.size(1) * 2048);
}

// `next_packed`: the packed weights of the GEMM the caller runs next over as many rows, of which each thread's last
// group prefetches the start of that thread's share, so the next call's first reads do not wait on memory (a hint:
// the result is the same with or without it).
torch::Tensor dot_linear(torch::Tensor x, torch::Tensor w_packed, c10::optional<torch::Tensor> bias, int64_t n,
                         c10::optional<torch::Tensor> next_packed) {
  const uint16_t* b_ptr = check_packed_linear(x, w_packed, bias, n);
  if (next_packed.has_value()) check_bf16(*next_packed, "next_packed", 5);
  const int64_t rows = x.size(0), k = x.size(1), groups = w_packed.size(0), chunks = w_packed.size(1);
  auto out = torch::empty({rows, n}, x.options());
  const uint16_t* x_ptr = raw(x);
  const uint16_t* w_ptr = raw(w_packed);
  uint16_t* o_ptr = raw_mut(out);
  // One task per (group, block of up to 4 rows), group-major, so the threads' shares differ by one row block, not by
  // one group: a projection of few groups (576 outputs = 9 groups on 2 threads) would otherwise leave a thread idle for
  // a ninth of the call. A group split between two threads has its weights read by both; the rest by one.
  const int64_t blocks = (rows + 3) / 4;
  // 5 to 8 rows in two even blocks (5: 3 + 2, not 4 + 1), which pace their halves of the next group's prefetches over
  // the same time: 0.92x the time of a rollout at 5 rows and 0.93x at 6 (whole rollouts, AMD EPYC with AVX512_BF16,
  // 2 threads, 2026-12-08); at 9 and 10 rows even blocks of 3 measured 0.99x and 1.03x
  auto row_start = [&](int64_t b) { return blocks == 2 ? b * rows / 2 : std::min(rows, b * 4); };
  at::parallel_for(0, groups * blocks, 1, [&](int64_t begin, int64_t end) {
    const char* next_call = next_packed.has_value() ? next_call_start(*next_packed, blocks) : nullptr;
    for (int64_t task = begin; task < end;) {
      const int64_t g = task / blocks;
      const int64_t first = task - g * blocks, last = std::min(blocks, end - g * blocks);  // this thread's blocks of g
      const uint16_t* group = w_ptr + g * chunks * 2048;
      const char* next = (g + 1) * blocks < end ? reinterpret_cast<const char*>(group + chunks * 2048) : next_call;
      // this thread's rows of g, over which the next group's prefetch is shared in proportion to each block's rows
      const int64_t rows_from = row_start(first), rows_to = row_start(last);
      for (int64_t b = first; b < last; ++b) {
        const int64_t r0 = row_start(b), r1 = row_start(b + 1);
        const uint16_t* xr = x_ptr + r0 * k;
        uint16_t* outr = o_ptr + r0 * n;
        const bool stream = task == begin && b == first;
        const int from = static_cast<int>(64 * (r0 - rows_from) / (rows_to - rows_from));
        const int to = static_cast<int>(64 * (r1 - rows_from) / (rows_to - rows_from));
        switch (r1 - r0) {
          case 1: dot_block<1>(xr, k, group, chunks, stream, next, from, to, b_ptr, outr, n, g * 64); break;
          case 2: dot_block<2>(xr, k, group, chunks, stream, next, from, to, b_ptr, outr, n, g * 64); break;
          case 3: dot_block<3>(xr, k, group, chunks, stream, next, from, to, b_ptr, outr, n, g * 64); break;
          default: dot_block<4>(xr, k, group, chunks, stream, next, from, to, b_ptr, outr, n, g * 64); break;
        }
      }
      task = g * blocks + last;
    }
  });
  return out;
}

// Every decoder layer of one decode step in one call, through the kernels above in the order FusedDecoder.step calls
// them from Python (so the same bits): per layer, RMSNorm -> q/k/v GEMM -> RoPE -> attention -> o GEMM -> residual
// add + RMSNorm -> gate/up GEMM -> SiLU x up -> down GEMM; then the residual add and the final norm, whose output
// (A, D) bf16, the output layer's input, is returned. hidden (A, D) bf16, the embedded tokens, is updated in place
// to the last residual sum. `weights` holds 6 tensors a layer (input norm, q/k/v pack, o pack, gate/up pack, down
// pack, post-attention norm), `biases` 4 (one a GEMM; an empty tensor: none) and `out_features` 4; `amx`: the GEMMs
// run amx_linear, else dot_linear. The caches, RoPE tables, positions, `column`, `scale` and `rows` are
// decode_attention's and rope's, per layer where a list. A step is ~270 kernel calls: from Python each costs ~1 us of
// binding plus the interpreter's work between them (~0.7 ms a step on an AMD EPYC, 2 threads, 2026-12-07).
torch::Tensor decode_layers(torch::Tensor hidden, std::vector<torch::Tensor> weights, std::vector<torch::Tensor> biases,
                            std::vector<int64_t> out_features, bool amx, torch::Tensor final_norm, double eps,
                            torch::Tensor cos, torch::Tensor sin, torch::Tensor positions, int64_t heads,
                            int64_t kv_heads, std::vector<torch::Tensor> prompt_keys,
                            std::vector<torch::Tensor> prompt_values, torch::Tensor prompt_bias,
                            std::vector<torch::Tensor> own_keys, std::vector<torch::Tensor> own_values,
                            torch::Tensor own_bias, int64_t column, double scale,
                            c10::optional<torch::Tensor> rows) {
  const size_t layers = prompt_keys.size();
  TORCH_CHECK(weights.size() == 6 * layers && biases.size() == 4 * layers && out_features.size() == 4 * layers &&
                  prompt_values.size() == layers && own_keys.size() == layers && own_values.size() == layers,
              "decode_layers: expected 6 weights, 4 biases and 4 output sizes a layer and one cache each for ",
              layers, " layers, got ", weights.size(), ", ", biases.size(), ", ", out_features.size(), " and ",
              prompt_values.size(), "/", own_keys.size(), "/", own_values.size());
  auto gemm = [&](const torch::Tensor& x, size_t layer, int which) {
    const torch::Tensor& bias = biases[4 * layer + which];
    const c10::optional<torch::Tensor> b = bias.numel() > 0 ? c10::optional<torch::Tensor>(bias) : c10::nullopt;
    const torch::Tensor& packed = weights[6 * layer + 1 + which];
    const int64_t n = out_features[4 * layer + which];
    if (amx) return amx_linear(x, packed, b, n);
    // the GEMM after this one: the layer's next projection, or the next layer's q/k/v
    const c10::optional<torch::Tensor> next =
        which < 3 ? c10::optional<torch::Tensor>(weights[6 * layer + 2 + which])
                  : (layer + 1 < layers ? c10::optional<torch::Tensor>(weights[6 * (layer + 1) + 1]) : c10::nullopt);
    return dot_linear(x, packed, b, n, next);
  };
  c10::optional<torch::Tensor> delta = c10::nullopt;
  for (size_t i = 0; i < layers; ++i) {
    torch::Tensor normed = add_rms_norm(hidden, delta, weights[6 * i], eps);
    torch::Tensor rotated = rope(gemm(normed, i, 0), cos, sin, positions, heads, kv_heads);
    torch::Tensor context = decode_attention(rotated, prompt_keys[i], prompt_values[i], prompt_bias, own_keys[i],
                                             own_values[i], own_bias, column, scale, rows);
    normed = add_rms_norm(hidden, gemm(context, i, 1), weights[6 * i + 5], eps);
    delta = gemm(silu_mul(gemm(normed, i, 2)), i, 3);
  }
  return add_rms_norm(hidden, delta, final_norm, eps);
}

// Writes weight (N, K) bf16 into groups [group_start, group_start + ceil(N / 64)) of w_packed (G, K / 32, 4, 16, 32),
// the layout amx_linear reads: element [g, c, t, p, 2 j + e] = weight[64 (g - group_start) + 16 t + j, 32 c + 2 p + e],
// i.e. a 16 x 16 transpose of 32-bit input pairs per (g, c, t). Rows past N in the last group are left as they are
// (the caller zero-fills w_packed when N is not a multiple of 64).
void amx_pack(torch::Tensor weight, torch::Tensor w_packed, int64_t group_start) {
  check_bf16(weight, "weight", 2);
  check_bf16(w_packed, "w_packed", 5);
  const int64_t n = weight.size(0), k = weight.size(1), chunks = w_packed.size(1);
  TORCH_CHECK(k % 32 == 0 && chunks * 32 == k && w_packed.size(2) == 4 && w_packed.size(3) == 16 &&
                  w_packed.size(4) == 32, "w_packed: expected (G, ", k / 32, ", 4, 16, 32) for ", k, " input features");
  const int64_t groups = (n + 63) / 64;
  TORCH_CHECK(group_start >= 0 && group_start + groups <= w_packed.size(0), "groups [", group_start, ", ",
              group_start + groups, ") outside w_packed's ", w_packed.size(0));
  const uint32_t* src = reinterpret_cast<const uint32_t*>(raw(weight));  // (N, K / 2) input pairs
  uint32_t* dst = reinterpret_cast<uint32_t*>(raw_mut(w_packed)) + group_start * chunks * 4 * 256;
  const int64_t pairs = k / 2;
  at::parallel_for(0, groups, 1, [&](int64_t begin, int64_t end) {
    for (int64_t g = begin; g < end; ++g)
      for (int64_t t = 0; t < 4; ++t)
        for (int64_t j = 0; j < 16; ++j) {
          const int64_t row = g * 64 + t * 16 + j;
          if (row >= n) return;
          const uint32_t* in = src + row * pairs;
          for (int64_t c = 0; c < chunks; ++c) {
            uint32_t* out = dst + ((g * chunks + c) * 4 + t) * 256 + j;
            for (int64_t pr = 0; pr < 16; ++pr) out[pr * 16] = in[c * 16 + pr];
          }
        }
  });
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("add_rms_norm", &add_rms_norm, "residual add + RMSNorm (bf16)", py::arg("hidden"), py::arg("delta"),
        py::arg("weight"), py::arg("eps"));
  m.def("rope", &rope, "RoPE on the queries and keys of a fused q/k/v projection (bf16)");
  m.def("decode_attention", &decode_attention,
        "one-query grouped attention over a shared prompt cache and each row's own cache (bf16)", py::arg("qkv_rot"),
        py::arg("prompt_keys_t"), py::arg("prompt_values"), py::arg("prompt_bias"), py::arg("own_keys_t"),
        py::arg("own_values"), py::arg("own_bias"), py::arg("column"), py::arg("scale"), py::arg("rows") = py::none());
  m.def("silu_mul", &silu_mul, "silu(gate) * up (bf16)");
  m.def("amx_permitted", &amx_permitted, "whether this process may use AMX tiles (asks the kernel once)");
  m.def("amx_linear", &amx_linear, "x @ W^T + bias over AMX-packed bf16 weights (pack_amx)", py::arg("x"),
        py::arg("w_packed"), py::arg("bias"), py::arg("n"));
  m.def("dot_linear", &dot_linear, "x @ W^T + bias over the same packed weights with AVX512_BF16 dot products",
        py::arg("x"), py::arg("w_packed"), py::arg("bias"), py::arg("n"), py::arg("next_packed") = py::none());
  m.def("amx_pack", &amx_pack, "write a (N, K) bf16 weight into amx_linear's packed layout", py::arg("weight"),
        py::arg("w_packed"), py::arg("group_start"));
  m.def("decode_layers", &decode_layers, "every decoder layer of a decode step, then the final norm (bf16)",
        py::arg("hidden"), py::arg("weights"), py::arg("biases"), py::arg("out_features"), py::arg("amx"),
        py::arg("final_norm"), py::arg("eps"), py::arg("cos"), py::arg("sin"), py::arg("positions"), py::arg("heads"),
        py::arg("kv_heads"), py::arg("prompt_keys"), py::arg("prompt_values"), py::arg("prompt_bias"),
        py::arg("own_keys"), py::arg("own_values"), py::arg("own_bias"), py::arg("column"), py::arg("scale"),
        py::arg("rows") = py::none());
  m.def("sample_tokens", &sample_tokens, "inverse-CDF draws from softmax(logits / T) and their log-probs");
}

// fp32 CPU kernels for one decode step of a Llama-style decoder, with AVX2 + FMA (any x86 CPU torch runs AVX2
// kernels on): the GEMM of the few running rows (fp32_linear, fp32_linears) and the fused element-wise and attention
// kernels of rlvr/kernels/fused_decode.py's fp32 step (add_rms_norm, rope, decode_attention, silu_mul,
// sample_tokens). They take the shapes and layouts of decode_kernels.cpp's bf16 kernels of the same names (R rows,
// D hidden size, H query heads, Hk KV heads, G = H / Hk, d head size, keys cached transposed in blocks of 16
// positions), in fp32 throughout, computing what transformers' fp32 modules compute up to the order of a sum.
//
// GEMM: at 16 rows a decode step's GEMMs are bound by streaming the weights from memory (4 bytes a parameter, read
// once a step) or by the FMA rate; a BLAS tuned for large matrices reaches neither there: on an AMD EPYC (AVX2,
// 2 threads) MKL's sgemm streamed SmolLM2's weights at ~3 GB/s. Here each thread takes a contiguous range of W's rows
// and streams it once, straight from the nn.Linear's own (N, K) weight (no packed copy): three rows of W at a time
// stay in L1 while every block of four rows of x is multiplied with them (12 fp32x8 accumulators, summed across
// lanes at the end), so W is read from memory once and x from cache.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include <immintrin.h>

#include "avx2.h"
#include "decode_common.h"

namespace {

using namespace rlvr_avx2;    // hsum, hmax, exp8, exp1, check_fp32 (avx2.h)
using namespace rlvr_decode;  // shape checks, invert_cdf (decode_common.h)

// out[r, j] = sum_k x[r, k] w[j, k] (+ bias[j]) for R <= 4 rows of x and C <= 3 rows of w, all of length k.
template <int R, int C>
inline void block(const float* x, int64_t ldx, const float* w, int64_t k, const float* bias, float* out,
                  int64_t ldo, const float* next) {
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= k; i += 8) {
    if (next != nullptr && i % 16 == 0)  // the next rows of W, into L1 while these compute
      for (int c = 0; c < 3; ++c) _mm_prefetch(reinterpret_cast<const char*>(next + c * k + i), _MM_HINT_T0);
    __m256 wv[C];
    for (int c = 0; c < C; ++c) wv[c] = _mm256_loadu_ps(w + c * k + i);
    for (int r = 0; r < R; ++r) {
      const __m256 xv = _mm256_loadu_ps(x + r * ldx + i);
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(xv, wv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      float sum = hsum(acc[r][c]);
      for (int64_t t = i; t < k; ++t) sum += x[r * ldx + t] * w[c * k + t];
      out[r * ldo + c] = bias != nullptr ? sum + bias[c] : sum;
    }
}

// The first block of rows streams w from memory and prefetches `next` (the thread's next three rows of W, or null);
// the later blocks read w from L1.
template <int C>
inline void rows_block(int64_t rows, const float* x, int64_t k, const float* w, const float* bias, float* out,
                       int64_t n, const float* next) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) block<4, C>(x + r * k, k, w, k, bias, out + r * n, n, r == 0 ? next : nullptr);
  const float* pf = r == 0 ? next : nullptr;
  switch (rows - r) {
    case 1: block<1, C>(x + r * k, k, w, k, bias, out + r * n, n, pf); break;
    case 2: block<2, C>(x + r * k, k, w, k, bias, out + r * n, n, pf); break;
    case 3: block<3, C>(x + r * k, k, w, k, bias, out + r * n, n, pf); break;
    default: break;
  }
}

const float* optional_bias(const c10::optional<torch::Tensor>& bias, int64_t n) {
  if (!bias.has_value()) return nullptr;
  check_fp32(*bias, "bias", 1);
  TORCH_CHECK(bias->size(0) == n, "bias: expected ", n, " entries, got ", bias->size(0));
  return bias->data_ptr<float>();
}

// x (M, K) fp32 times each weight (N_i, K) fp32 (nn.Linear's layout), their outputs side by side, plus bias
// (sum N_i,) fp32 or None -> (M, sum N_i) fp32: q/k/v (or gate/up) as one GEMM over the layers' own weights.
torch::Tensor fp32_linears(torch::Tensor x, std::vector<torch::Tensor> weights, c10::optional<torch::Tensor> bias) {
  check_fp32(x, "x", 2);
  TORCH_CHECK(!weights.empty(), "weights: expected at least one");
  const int64_t rows = x.size(0), k = x.size(1);
  struct Task {  // up to three rows of one weight
    const float* w;
    int64_t column, count;
  };
  std::vector<Task> tasks;
  int64_t n = 0;
  for (const auto& weight : weights) {
    check_fp32(weight, "weight", 2);
    TORCH_CHECK(weight.size(1) == k, "weight: expected ", k, " input features (x's), got ", weight.size(1));
    const float* w = weight.data_ptr<float>();
    for (int64_t j = 0; j < weight.size(0); j += 3)
      tasks.push_back({w + j * k, n + j, std::min<int64_t>(3, weight.size(0) - j)});
    n += weight.size(0);
  }
  const float* b_ptr = optional_bias(bias, n);
  auto out = torch::empty({rows, n}, x.options());
  const float* x_ptr = x.data_ptr<float>();
  float* o_ptr = out.data_ptr<float>();
  // grain: at least ~64 KB of weights a task, so a thread streams long contiguous runs
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, 3 * k));
  at::parallel_for(0, static_cast<int64_t>(tasks.size()), grain, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const Task& task = tasks[t];
      const float* b = b_ptr != nullptr ? b_ptr + task.column : nullptr;
      const float* next = t + 1 < end && tasks[t + 1].count == 3 ? tasks[t + 1].w : nullptr;
      switch (task.count) {
        case 1: rows_block<1>(rows, x_ptr, k, task.w, b, o_ptr + task.column, n, next); break;
        case 2: rows_block<2>(rows, x_ptr, k, task.w, b, o_ptr + task.column, n, next); break;
        default: rows_block<3>(rows, x_ptr, k, task.w, b, o_ptr + task.column, n, next); break;
      }
    }
  });
  return out;
}

// x (M, K) fp32, weight (N, K) fp32 (nn.Linear's layout), bias (N,) fp32 or None -> (M, N) fp32.
torch::Tensor fp32_linear(torch::Tensor x, torch::Tensor weight, c10::optional<torch::Tensor> bias) {
  return fp32_linears(x, {weight}, bias);
}

// ---- the fused step's element-wise and attention kernels ----------------------------------------------------

// hidden (R, D) fp32, updated in place to hidden + delta when delta is given (the residual add); returns
// RMSNorm(hidden) * weight as transformers' LlamaRMSNorm computes it: hidden * rsqrt(mean(hidden^2) + eps) * weight.
torch::Tensor add_rms_norm(torch::Tensor hidden, c10::optional<torch::Tensor> delta, torch::Tensor weight,
                           double eps) {
  check_fp32(hidden, "hidden", 2);
  check_fp32(weight, "weight", 1);
  const int64_t rows = hidden.size(0), dim = hidden.size(1);
  TORCH_CHECK(dim > 0, "hidden: expected a non-empty hidden size");
  TORCH_CHECK(weight.size(0) == dim, "weight: expected ", dim, " entries, got ", weight.size(0));
  const float* d_ptr = nullptr;
  if (delta.has_value()) {
    check_fp32(*delta, "delta", 2);
    TORCH_CHECK(delta->sizes() == hidden.sizes(), "delta: expected shape ", hidden.sizes(), ", got ",
                delta->sizes());
    d_ptr = delta->data_ptr<float>();
  }
  auto out = torch::empty_like(hidden);
  float* h_ptr = hidden.data_ptr<float>();
  const float* w = weight.data_ptr<float>();
  float* o_ptr = out.data_ptr<float>();
  at::parallel_for(0, rows, std::max<int64_t>(1, 32768 / dim), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* h = h_ptr + r * dim;
      float* o = o_ptr + r * dim;
      __m256 sum_sq = _mm256_setzero_ps();
      int64_t i = 0;
      for (; i + 8 <= dim; i += 8) {
        __m256 v = _mm256_loadu_ps(h + i);
        if (d_ptr != nullptr) {
          v = _mm256_add_ps(v, _mm256_loadu_ps(d_ptr + r * dim + i));
          _mm256_storeu_ps(h + i, v);
        }
        sum_sq = _mm256_fmadd_ps(v, v, sum_sq);
      }
      float total = hsum(sum_sq);
      for (; i < dim; ++i) {
        if (d_ptr != nullptr) h[i] += d_ptr[r * dim + i];
        total += h[i] * h[i];
      }
      const float inv_rms = 1.0f / std::sqrt(total / static_cast<float>(dim) + static_cast<float>(eps));
      const __m256 scale = _mm256_set1_ps(inv_rms);
      for (i = 0; i + 8 <= dim; i += 8)
        _mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_loadu_ps(w + i), _mm256_mul_ps(_mm256_loadu_ps(h + i), scale)));
      for (; i < dim; ++i) o[i] = w[i] * (h[i] * inv_rms);
    }
  });
  return out;
}

// qkv (R, (H + 2 Hk) d) fp32: one row's queries, keys, values side by side (the fused projection's output) ->
// (R, H + 2 Hk, d) fp32, queries and keys rotated as transformers' apply_rotary_pos_emb does (x * cos +
// rotate_half(x) * sin), values copied. cos, sin: (P, d) fp32 tables; positions (R,) int64 rows of them.
torch::Tensor rope(torch::Tensor qkv, torch::Tensor cos, torch::Tensor sin, torch::Tensor positions, int64_t heads,
                   int64_t kv_heads) {
  check_fp32(qkv, "qkv", 2);
  check_fp32(cos, "cos", 2);
  check_fp32(sin, "sin", 2);
  const int64_t head_dim = check_rope(qkv, cos, sin, positions, heads, kv_heads), half = head_dim / 2;
  const int64_t rows = qkv.size(0), all_heads = heads + 2 * kv_heads;
  const int64_t* pos_ptr = positions.data_ptr<int64_t>();
  auto out = torch::empty({rows, all_heads, head_dim}, qkv.options());
  const float* qkv_ptr = qkv.data_ptr<float>();
  float* o_ptr = out.data_ptr<float>();
  for (int64_t r = 0; r < rows; ++r) {  // (H + 2 Hk) d values a row: too little to split over threads
    const float* row = qkv_ptr + r * all_heads * head_dim;
    float* o = o_ptr + r * all_heads * head_dim;
    const float* c = cos.data_ptr<float>() + pos_ptr[r] * head_dim;
    const float* s = sin.data_ptr<float>() + pos_ptr[r] * head_dim;
    for (int64_t h = 0; h < heads + kv_heads; ++h) {
      const float* x = row + h * head_dim;
      float* y = o + h * head_dim;
      for (int64_t i = 0; i < head_dim; ++i) {  // rotate_half(x) = (-x2, x1); the compiler vectorises this loop
        const float partner = i < half ? -x[i + half] : x[i - half];
        y[i] = x[i] * c[i] + partner * s[i];
      }
    }
    std::memcpy(o + (heads + kv_heads) * head_dim, row + (heads + kv_heads) * head_dim,
                kv_heads * head_dim * sizeof(float));
  }
  return out;
}

// A KV cache segment of one (row or prompt, KV head): keys transposed in blocks of 16 positions (C / 16, d, 16),
// values (C, d), `length` positions filled, bias (C) fp32 added to the scaled scores (0, or -inf = never attended).
struct Segment {
  const float* keys_t;
  const float* values;
  const float* bias;
  int64_t length;
};

// Scaled scores of G queries (q_scaled (d, G)) over a segment's positions, rounded up to a multiple of 8 (the
// positions past `length` are cached zeros, never read after) -> scores (G, stride) from column 0.
template <int G>
void segment_scores(const Segment& seg, const float* q_scaled, int64_t head_dim, float* scores, int64_t stride) {
  for (int64_t j = 0; j < seg.length; j += 8) {  // half a block of 16 positions: 8 lanes per dimension
    const float* block = seg.keys_t + j / 16 * 16 * head_dim + j % 16;
    __m256 acc[G];
    for (int g = 0; g < G; ++g) acc[g] = _mm256_setzero_ps();
    for (int64_t i = 0; i < head_dim; ++i) {
      const __m256 k = _mm256_loadu_ps(block + i * 16);
      for (int g = 0; g < G; ++g) acc[g] = _mm256_fmadd_ps(_mm256_set1_ps(q_scaled[i * G + g]), k, acc[g]);
    }
    const __m256 b = _mm256_loadu_ps(seg.bias + j);
    for (int g = 0; g < G; ++g) _mm256_storeu_ps(scores + g * stride + j, _mm256_add_ps(acc[g], b));
  }
}

// acc (G, d) += probabilities (G, stride, from column 0) @ the segment's values; d a multiple of 8.
template <int G>
void segment_values(const Segment& seg, const float* probs, int64_t stride, int64_t head_dim, float* acc_out) {
  for (int64_t c = 0; c < head_dim; c += 8) {
    __m256 acc[G];
    for (int g = 0; g < G; ++g) acc[g] = _mm256_loadu_ps(acc_out + g * head_dim + c);
    for (int64_t j = 0; j < seg.length; ++j) {
      if (seg.bias[j] == -std::numeric_limits<float>::infinity()) continue;
      const __m256 x = _mm256_loadu_ps(seg.values + j * head_dim + c);
      for (int g = 0; g < G; ++g) acc[g] = _mm256_fmadd_ps(_mm256_set1_ps(probs[g * stride + j]), x, acc[g]);
    }
    for (int g = 0; g < G; ++g) _mm256_storeu_ps(acc_out + g * head_dim + c, acc[g]);
  }
}

// One (row, KV head) of decode_attention for G query heads over the prompt's segment then the row's own.
// scores: G x stride floats (stride = prompt length + own length rounded up to 8), q_scaled G x d, out G x d.
template <int G>
void attend(const float* q, const Segment& prompt, const Segment& own, int64_t head_dim, float scale,
            float* scores, float* q_scaled, float* out) {
  for (int g = 0; g < G; ++g)  // the queries pre-scaled, laid out (d, G)
    for (int64_t i = 0; i < head_dim; ++i) q_scaled[i * G + g] = q[g * head_dim + i] * scale;
  const int64_t length = prompt.length + own.length, stride = prompt.length + (own.length + 7) / 8 * 8;
  segment_scores<G>(prompt, q_scaled, head_dim, scores, stride);
  segment_scores<G>(own, q_scaled, head_dim, scores + prompt.length, stride);
  // softmax over all positions of each query head; masked positions (bias -inf) get exactly 0
  const __m256 neg_inf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  for (int g = 0; g < G; ++g) {
    float* s = scores + g * stride;
    const int64_t whole = length / 8 * 8;
    __m256 top_v = neg_inf;
    for (int64_t j = 0; j < whole; j += 8) top_v = _mm256_max_ps(top_v, _mm256_loadu_ps(s + j));
    float top = hmax(top_v);
    for (int64_t j = whole; j < length; ++j) top = std::max(top, s[j]);
    const __m256 top_b = _mm256_set1_ps(top);
    __m256 total_v = _mm256_setzero_ps();
    for (int64_t j = 0; j < whole; j += 8) {
      const __m256 x = _mm256_loadu_ps(s + j);
      const __m256 live = _mm256_cmp_ps(x, neg_inf, _CMP_GT_OQ);
      const __m256 p = _mm256_and_ps(live, exp8(_mm256_sub_ps(x, top_b)));
      _mm256_storeu_ps(s + j, p);
      total_v = _mm256_add_ps(total_v, p);
    }
    float total = hsum(total_v);
    for (int64_t j = whole; j < length; ++j) {
      s[j] = s[j] > -std::numeric_limits<float>::infinity() ? exp1(s[j] - top) : 0.0f;
      total += s[j];
    }
    const float inv = 1.0f / total;
    for (int64_t j = 0; j < length; ++j) s[j] *= inv;
  }
  std::fill(out, out + G * head_dim, 0.0f);
  segment_values<G>(prompt, scores, stride, head_dim, out);
  segment_values<G>(own, scores + prompt.length, stride, head_dim, out);
}

using AttendFn = void (*)(const float*, const Segment&, const Segment&, int64_t, float, float*, float*, float*);
constexpr int MAX_GROUPS = 8;
AttendFn attend_for(int64_t groups) {
  static const AttendFn table[MAX_GROUPS] = {attend<1>, attend<2>, attend<3>, attend<4>,
                                              attend<5>, attend<6>, attend<7>, attend<8>};
  return table[groups - 1];
}

void check_cache(const torch::Tensor& keys_t, const torch::Tensor& values, const torch::Tensor& bias,
                 int64_t kv_heads, int64_t head_dim, const char* name) {
  check_fp32(keys_t, name, 5);
  check_fp32(values, name, 4);
  check_cache_shapes(keys_t, values, bias, kv_heads, head_dim, name);
}

// Attention of one new token per row, as decode_kernels.cpp's decode_attention (the same arguments and layouts) in
// fp32: qkv_rot (A, H + 2 Hk, d) from rope() for the rows `rows` (A,) int64, increasing, of the cache's R (None: all
// R); the new keys/values go to position `column` of each row's own cache, then query head h (KV head h / G)
// attends over its prompt's cache (row r reads prompt r / (R / U)) and the row's first column + 1 positions.
// Returns (A, H d), o_proj's input. d must be a multiple of 8.
torch::Tensor decode_attention(torch::Tensor qkv_rot, torch::Tensor prompt_keys_t, torch::Tensor prompt_values,
                               torch::Tensor prompt_bias, torch::Tensor own_keys_t, torch::Tensor own_values,
                               torch::Tensor own_bias, int64_t column, double scale,
                               c10::optional<torch::Tensor> rows_index) {
  check_fp32(qkv_rot, "qkv_rot", 3);
  check_fp32(own_keys_t, "own keys", 5);
  const int64_t active = qkv_rot.size(0), rows = own_keys_t.size(0), head_dim = qkv_rot.size(2);
  const int64_t kv_heads = own_keys_t.size(1);
  const int64_t heads = check_attention_heads(qkv_rot, kv_heads, MAX_GROUPS), groups = heads / kv_heads;
  TORCH_CHECK(head_dim % 8 == 0, "head size must be a multiple of 8, got ", head_dim);
  check_cache(prompt_keys_t, prompt_values, prompt_bias, kv_heads, head_dim, "prompt");
  check_cache(own_keys_t, own_values, own_bias, kv_heads, head_dim, "own");
  const int64_t prompts = prompt_keys_t.size(0), prompt_len = prompt_values.size(2);
  const int64_t own_capacity = own_values.size(2);
  const std::vector<int64_t> row_of = cache_rows(rows_index, active, rows);  // the cache row of each input row
  const int64_t repeats = samples_per_prompt(rows, prompts, column, own_capacity);
  auto out = torch::empty({active, heads * head_dim}, qkv_rot.options());
  const float* in_ptr = qkv_rot.data_ptr<float>();
  const float* pk_ptr = prompt_keys_t.data_ptr<float>();
  const float* pv_ptr = prompt_values.data_ptr<float>();
  const float* pb_ptr = prompt_bias.data_ptr<float>();
  float* ok_ptr = own_keys_t.data_ptr<float>();
  float* ov_ptr = own_values.data_ptr<float>();
  const float* ob_ptr = own_bias.data_ptr<float>();
  float* o_ptr = out.data_ptr<float>();
  const AttendFn fn = attend_for(groups);
  const int64_t width = (heads + 2 * kv_heads) * head_dim;
  const int64_t stride = prompt_len + (column + 1 + 7) / 8 * 8;
  // tasks row-major: a thread's consecutive tasks share a prompt, whose cache then stays in its caches
  at::parallel_for(0, active * kv_heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(groups * stride), q_scaled(groups * head_dim);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t a = task / kv_heads, hk = task % kv_heads, r = row_of[a], u = r / repeats;
      float* own_k = ok_ptr + (r * kv_heads + hk) * own_capacity * head_dim;
      float* own_v = ov_ptr + (r * kv_heads + hk) * own_capacity * head_dim;
      const float* new_k = in_ptr + a * width + (heads + hk) * head_dim;
      const float* new_v = in_ptr + a * width + (heads + kv_heads + hk) * head_dim;
      float* key_column = own_k + column / 16 * 16 * head_dim + column % 16;
      for (int64_t i = 0; i < head_dim; ++i) key_column[i * 16] = new_k[i];
      std::memcpy(own_v + column * head_dim, new_v, head_dim * sizeof(float));
      const Segment prompt{pk_ptr + (u * kv_heads + hk) * prompt_len * head_dim,
                           pv_ptr + (u * kv_heads + hk) * prompt_len * head_dim, pb_ptr + u * prompt_len, prompt_len};
      const Segment own{own_k, own_v, ob_ptr + r * own_capacity, column + 1};
      fn(in_ptr + a * width + hk * groups * head_dim, prompt, own, head_dim, static_cast<float>(scale), scores.data(),
         q_scaled.data(), o_ptr + a * heads * head_dim + hk * groups * head_dim);
    }
  });
  return out;
}

// gate_up (R, 2 I) fp32, the gate and up projections side by side -> (R, I) fp32 silu(gate) * up.
torch::Tensor silu_mul(torch::Tensor gate_up) {
  check_fp32(gate_up, "gate_up", 2);
  TORCH_CHECK(gate_up.size(1) % 2 == 0, "gate_up: expected an even column count, got ", gate_up.size(1));
  const int64_t rows = gate_up.size(0), inner = gate_up.size(1) / 2;
  TORCH_CHECK(inner > 0, "gate_up: expected a non-empty intermediate size");
  auto out = torch::empty({rows, inner}, gate_up.options());
  const float* in_ptr = gate_up.data_ptr<float>();
  float* o_ptr = out.data_ptr<float>();
  const __m256 one = _mm256_set1_ps(1.0f);
  at::parallel_for(0, rows, std::max<int64_t>(1, 32768 / inner), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* gate = in_ptr + r * 2 * inner;
      float* o = o_ptr + r * inner;
      int64_t i = 0;
      for (; i + 8 <= inner; i += 8) {
        const __m256 x = _mm256_loadu_ps(gate + i);
        const __m256 silu = _mm256_div_ps(x, _mm256_add_ps(one, exp8(_mm256_sub_ps(_mm256_setzero_ps(), x))));
        _mm256_storeu_ps(o + i, _mm256_mul_ps(silu, _mm256_loadu_ps(gate + inner + i)));
      }
      for (; i < inner; ++i) o[i] = gate[i] / (1.0f + exp1(-gate[i])) * gate[inner + i];
    }
  });
  return out;
}

// One draw per row from softmax(logits / temperature) by inverting its CDF at uniforms (R,) float64 in [0, 1), as
// rlvr.rollout.decode.sample_categorical does (the running sum in float64), and the drawn token's log-prob.
// logits (R, V) fp32. Returns (tokens (R,) int64, logprobs (R,) fp32).
std::vector<torch::Tensor> sample_tokens(torch::Tensor logits, double temperature, torch::Tensor uniforms) {
  check_fp32(logits, "logits", 2);
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  check_sampling(rows, vocab, temperature, uniforms);
  auto tokens = torch::empty({rows}, logits.options().dtype(at::kLong));
  auto logprobs = torch::empty({rows}, logits.options());
  const float* l_ptr = logits.data_ptr<float>();
  const double* u_ptr = uniforms.data_ptr<double>();
  int64_t* t_ptr = tokens.data_ptr<int64_t>();
  float* lp_ptr = logprobs.data_ptr<float>();
  const float temp = static_cast<float>(temperature);
  const __m256 temp_v = _mm256_set1_ps(temp);
  const int64_t whole = vocab / 8 * 8;
  at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> probs(vocab);  // exp(x - max), unnormalised
    std::vector<double> chunk_sums((vocab + 7) / 8);
    for (int64_t r = begin; r < end; ++r) {
      const float* row = l_ptr + r * vocab;
      __m256 top_v = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
      for (int64_t i = 0; i < whole; i += 8) top_v = _mm256_max_ps(top_v, _mm256_div_ps(_mm256_loadu_ps(row + i), temp_v));
      float top = hmax(top_v);
      for (int64_t i = whole; i < vocab; ++i) top = std::max(top, row[i] / temp);
      const __m256 top_b = _mm256_set1_ps(top);
      double total = 0.0;
      for (int64_t i = 0, c = 0; i < vocab; i += 8, ++c) {
        if (i < whole) {
          const __m256 p = exp8(_mm256_sub_ps(_mm256_div_ps(_mm256_loadu_ps(row + i), temp_v), top_b));
          _mm256_storeu_ps(probs.data() + i, p);
          chunk_sums[c] = static_cast<double>(hsum(p));
        } else {
          float sum = 0.0f;
          for (int64_t t = i; t < vocab; ++t) sum += probs[t] = exp1(row[t] / temp - top);
          chunk_sums[c] = static_cast<double>(sum);
        }
        total += chunk_sums[c];
      }
      const double target = u_ptr[r] * total;
      const int64_t token = invert_cdf(chunk_sums, probs, vocab, 8, target);
      t_ptr[r] = token;
      lp_ptr[r] = row[token] / temp - top - static_cast<float>(std::log(total));
    }
  });
  return {tokens, logprobs};
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("fp32_linear", &fp32_linear, "x @ W^T + bias in fp32 for a few rows (AVX2 + FMA)", py::arg("x"),
        py::arg("weight"), py::arg("bias") = py::none());
  m.def("fp32_linears", &fp32_linears, "x @ [W_1; W_2; ...]^T + bias in fp32 for a few rows, from separate weights",
        py::arg("x"), py::arg("weights"), py::arg("bias") = py::none());
  m.def("add_rms_norm", &add_rms_norm, "residual add (in place) and RMSNorm, fp32", py::arg("hidden"),
        py::arg("delta"), py::arg("weight"), py::arg("eps"));
  m.def("rope", &rope, "rotary embedding of queries and keys, fp32");
  m.def("decode_attention", &decode_attention, "one-token attention over prompt and own caches, fp32",
        py::arg("qkv_rot"), py::arg("prompt_keys_t"), py::arg("prompt_values"), py::arg("prompt_bias"),
        py::arg("own_keys_t"), py::arg("own_values"), py::arg("own_bias"), py::arg("column"), py::arg("scale"),
        py::arg("rows") = py::none());
  m.def("silu_mul", &silu_mul, "silu(gate) * up, fp32");
  m.def("sample_tokens", &sample_tokens, "inverse-CDF sampling at one uniform a row, fp32 logits");
}

// The ISA-free parts of the fused decode step's kernels, shared by the bf16 (decode_kernels.cpp, AVX-512) and the
// fp32 (fp32_decode_kernels.cpp, AVX2) sources: the shape checks of rope and decode_attention (after each source's own
// dtype checks) and the sampling draw's CDF scan. Header-only, for one translation unit per extension.
#pragma once

#include <torch/extension.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace rlvr_decode {

// rope's qkv (R, (H + 2 Hk) d), cos, sin (P, d) tables and positions (R,) int64 rows of them; returns d.
inline int64_t check_rope(const torch::Tensor& qkv, const torch::Tensor& cos, const torch::Tensor& sin,
                          const torch::Tensor& positions, int64_t heads, int64_t kv_heads) {
  TORCH_CHECK(positions.device().is_cpu() && positions.scalar_type() == at::kLong && positions.is_contiguous() &&
                  positions.dim() == 1, "positions: expected a contiguous 1-d int64 CPU tensor, got ",
              positions.scalar_type(), " of shape ", positions.sizes(), " on ", positions.device());
  const int64_t rows = qkv.size(0), all_heads = heads + 2 * kv_heads;
  TORCH_CHECK(heads > 0 && kv_heads > 0 && qkv.size(1) % all_heads == 0, "qkv: ", qkv.size(1),
              " columns are not (", heads, " + 2 x ", kv_heads, ") heads");
  const int64_t head_dim = qkv.size(1) / all_heads;
  TORCH_CHECK(positions.size(0) == rows, "positions: expected ", rows, " entries, got ", positions.size(0));
  TORCH_CHECK(cos.sizes() == sin.sizes() && cos.size(1) == head_dim, "cos, sin: expected (positions, ", head_dim,
              ") tables");
  TORCH_CHECK(head_dim % 2 == 0, "head size must be even, got ", head_dim);
  const int64_t* pos_ptr = positions.data_ptr<int64_t>();
  for (int64_t r = 0; r < rows; ++r)
    TORCH_CHECK(pos_ptr[r] >= 0 && pos_ptr[r] < cos.size(0), "position ", pos_ptr[r], " outside the RoPE table of ",
                cos.size(0));
  return head_dim;
}

// decode_attention's query heads H from qkv_rot (A, H + 2 Hk, d), checked to be whole groups of at most max_groups
// heads per KV head.
inline int64_t check_attention_heads(const torch::Tensor& qkv_rot, int64_t kv_heads, int64_t max_groups) {
  const int64_t heads = qkv_rot.size(1) - 2 * kv_heads;
  TORCH_CHECK(kv_heads > 0 && heads > 0 && heads % kv_heads == 0, "qkv_rot: ", qkv_rot.size(1),
              " heads are not H query + 2 x ", kv_heads, " KV heads with H a multiple of ", kv_heads);
  TORCH_CHECK(heads / kv_heads <= max_groups, "at most ", max_groups, " query heads per KV head, got ",
              heads / kv_heads);
  return heads;
}

// A KV cache's shapes: keys_t (N, Hk, C / 16, d, 16), values (N, Hk, C, d), bias (N, C) fp32.
inline void check_cache_shapes(const torch::Tensor& keys_t, const torch::Tensor& values, const torch::Tensor& bias,
                               int64_t kv_heads, int64_t head_dim, const char* name) {
  const int64_t n = keys_t.size(0), capacity = keys_t.size(2) * 16;
  TORCH_CHECK(keys_t.size(1) == kv_heads && keys_t.size(3) == head_dim && keys_t.size(4) == 16, name,
              " keys: expected (", n, ", ", kv_heads, ", C / 16, ", head_dim, ", 16), got ", keys_t.sizes());
  TORCH_CHECK(values.size(0) == n && values.size(1) == kv_heads && values.size(2) == capacity &&
                  values.size(3) == head_dim, name, " values: expected (", n, ", ", kv_heads, ", ", capacity, ", ",
              head_dim, "), got ", values.sizes());
  TORCH_CHECK(bias.device().is_cpu() && bias.scalar_type() == at::kFloat && bias.is_contiguous() && bias.dim() == 2 &&
                  bias.size(0) == n && bias.size(1) == capacity, name, " bias: expected a contiguous (", n, ", ",
              capacity, ") fp32 CPU tensor, got ", bias.scalar_type(), " of shape ", bias.sizes());
}

// The cache row of each of the A input rows: rows_index (A,) int64, increasing, in [0, R); None: all R rows (A = R).
inline std::vector<int64_t> cache_rows(const c10::optional<torch::Tensor>& rows_index, int64_t active, int64_t rows) {
  std::vector<int64_t> row_of(active);
  if (rows_index.has_value()) {
    const torch::Tensor& index = *rows_index;
    TORCH_CHECK(index.device().is_cpu() && index.scalar_type() == at::kLong && index.is_contiguous() &&
                    index.dim() == 1 && index.size(0) == active, "rows: expected a contiguous (", active,
                ") int64 CPU tensor, got ", index.scalar_type(), " of shape ", index.sizes());
    const int64_t* idx = index.data_ptr<int64_t>();
    for (int64_t a = 0; a < active; ++a) {
      TORCH_CHECK(idx[a] >= 0 && idx[a] < rows && (a == 0 || idx[a] > idx[a - 1]), "rows: expected increasing "
                  "indices in [0, ", rows, "), got ", idx[a], " at ", a);
      row_of[a] = idx[a];
    }
  } else {
    TORCH_CHECK(active == rows, "qkv_rot: expected ", rows, " rows (the cache's), got ", active);
    for (int64_t a = 0; a < active; ++a) row_of[a] = a;
  }
  return row_of;
}

// The samples per prompt (R / U), with the new token's cache column checked against the own cache's capacity.
inline int64_t samples_per_prompt(int64_t rows, int64_t prompts, int64_t column, int64_t own_capacity) {
  TORCH_CHECK(prompts > 0 && rows % prompts == 0, rows, " rows are not a whole number of samples for ", prompts,
              " prompts");
  TORCH_CHECK(column >= 0 && column < own_capacity, "column ", column, " outside the cache capacity ", own_capacity);
  return rows / prompts;
}

// sample_tokens' temperature and uniforms (R,) float64, for logits of R rows and V entries.
inline void check_sampling(int64_t rows, int64_t vocab, double temperature, const torch::Tensor& uniforms) {
  TORCH_CHECK(temperature > 0.0, "temperature must be > 0, got ", temperature);
  TORCH_CHECK(vocab > 0, "logits: expected a non-empty vocabulary");
  TORCH_CHECK(uniforms.device().is_cpu() && uniforms.scalar_type() == at::kDouble && uniforms.is_contiguous() &&
                  uniforms.numel() == rows, "uniforms: expected ", rows, " contiguous float64 CPU values, got ",
              uniforms.numel(), " ", uniforms.scalar_type(), " on ", uniforms.device());
}

// The first entry whose running sum of probs (V unnormalised probabilities) passes target: whole chunks of `chunk`
// entries are skipped by their sums (chunk_sums), then entries are added one by one; where a chunk's (tree-summed)
// total overshot its entries' running sum, the scan goes on into the next chunk instead of settling on the chunk's
// last entry. A target at the very top (rounding) draws the last entry.
inline int64_t invert_cdf(const std::vector<double>& chunk_sums, const std::vector<float>& probs, int64_t vocab,
                          int64_t chunk, double target) {
  double running = 0.0;
  for (int64_t c = 0; c < static_cast<int64_t>(chunk_sums.size()); ++c) {
    if (running + chunk_sums[c] <= target) {
      running += chunk_sums[c];
      continue;
    }
    for (int64_t i = c * chunk; i < std::min(vocab, c * chunk + chunk); ++i) {
      running += probs[i];
      if (running > target) return i;
    }
  }
  return vocab - 1;
}

}  // namespace rlvr_decode

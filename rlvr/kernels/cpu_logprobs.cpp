// The trainer's token log-prob over the full vocabulary on a CPU (rlvr/kernels/cpu_logprobs.py), forward and backward,
// one row (position) at a time, with no (rows, V) fp32 buffer.
//
// Through torch ops a chunk of positions makes about ten passes over (rows, V) fp32 tensors (the fp32 copy of the
// logits, minus the logsumexp, exp, the entropy's product; again in backward, then the cast back to the logits' dtype),
// each a fresh allocation of hundreds of MB that the kernel page-faults in. Here a row of logits (V values, 96 KB in
// bf16 at V = 49,152) is read from memory once per pass and its second pass hits the L2 cache. Shapes: R rows, V
// vocabulary; logits bf16 or fp32, x = logits / temperature.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <immintrin.h>

#include "avx512.h"

namespace {

using namespace rlvr_avx512;  // load16, store16, exp16, tail_mask, to_float, ... (avx512.h)

// 16 logits from a bf16 or an fp32 row, as fp32; masked lanes read 0
inline __m512 load_row(const uint16_t* p, __mmask16 m) { return load16(p, m); }
inline __m512 load_row(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
inline void store_row(uint16_t* p, __m512 x, __mmask16 m) { store16(p, x, m); }
inline void store_row(float* p, __m512 x, __mmask16 m) { _mm512_mask_storeu_ps(p, m, x); }
inline float value_at(const uint16_t* p) { return to_float(*p); }
inline float value_at(const float* p) { return *p; }
inline void set_at(uint16_t* p, float v) { *p = to_bf16_bits(v); }
inline void set_at(float* p, float v) { *p = v; }

void check_inputs(const torch::Tensor& logits, const torch::Tensor& tokens) {
  TORCH_CHECK(logits.device().is_cpu() && logits.dim() == 2 && logits.is_contiguous() &&
                  (logits.scalar_type() == at::kBFloat16 || logits.scalar_type() == at::kFloat),
              "logits: expected a contiguous (R, V) bf16 or fp32 CPU tensor, got ", logits.scalar_type(), " of shape ",
              logits.sizes());
  TORCH_CHECK(logits.size(1) > 0, "logits: expected a non-empty vocabulary");
  TORCH_CHECK(tokens.device().is_cpu() && tokens.scalar_type() == at::kLong && tokens.dim() == 1 &&
                  tokens.is_contiguous() && tokens.size(0) == logits.size(0),
              "tokens: expected a contiguous (", logits.size(0), ",) int64 CPU tensor, got ", tokens.scalar_type(),
              " of shape ", tokens.sizes());
  const int64_t vocab = logits.size(1);
  const int64_t* t = tokens.data_ptr<int64_t>();
  for (int64_t r = 0; r < tokens.size(0); ++r)
    TORCH_CHECK(t[r] >= 0 && t[r] < vocab, "tokens[", r, "] = ", t[r], " is outside the vocabulary [0, ", vocab, ")");
}

// Per row: m = max x, s = sum exp(x - m), w = sum exp(x - m) (x - m); logsumexp = m + log s, the token's log-prob
// x_t - logsumexp, entropy -sum p log p = log s - w / s.
template <typename T>
void forward_rows(const T* logits, const int64_t* tokens, int64_t rows, int64_t vocab, float inv_temperature,
                  float* logprobs, float* entropy, float* lse) {
  const __m512 scale = _mm512_set1_ps(inv_temperature);
  at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* row = logits + r * vocab;
      __m512 max_v = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
      for (int64_t i = 0; i < vocab; i += 16) {
        const __mmask16 m = tail_mask(vocab - i);
        max_v = _mm512_mask_max_ps(max_v, m, max_v, _mm512_mul_ps(load_row(row + i, m), scale));
      }
      const float top = _mm512_reduce_max_ps(max_v);
      const __m512 top_v = _mm512_set1_ps(top);
      __m512 sum_v = _mm512_setzero_ps(), weighted_v = _mm512_setzero_ps();
      for (int64_t i = 0; i < vocab; i += 16) {
        const __mmask16 m = tail_mask(vocab - i);
        const __m512 shifted = _mm512_sub_ps(_mm512_mul_ps(load_row(row + i, m), scale), top_v);
        const __m512 e = _mm512_maskz_mov_ps(m, exp16(shifted));
        sum_v = _mm512_add_ps(sum_v, e);
        weighted_v = _mm512_fmadd_ps(e, _mm512_maskz_mov_ps(m, shifted), weighted_v);
      }
      const float sum = _mm512_reduce_add_ps(sum_v), log_sum = std::log(sum);
      lse[r] = top + log_sum;
      logprobs[r] = value_at(row + tokens[r]) * inv_temperature - lse[r];
      entropy[r] = log_sum - _mm512_reduce_add_ps(weighted_v) / sum;
    }
  });
}

// d logp_t / d logits = (onehot(t) - softmax(x)) / temperature, times the row's incoming gradient g; rows with g = 0
// (padding) are zeros without reading their logits.
template <typename T>
void backward_rows(const T* logits, const int64_t* tokens, const float* lse, const float* grad, int64_t rows,
                   int64_t vocab, float inv_temperature, T* out) {
  const __m512 scale = _mm512_set1_ps(inv_temperature);
  at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* row = logits + r * vocab;
      T* out_row = out + r * vocab;
      const float g = grad[r] * inv_temperature;
      if (g == 0.0f) {
        for (int64_t i = 0; i < vocab; i += 16) store_row(out_row + i, _mm512_setzero_ps(), tail_mask(vocab - i));
        continue;
      }
      const __m512 lse_v = _mm512_set1_ps(lse[r]), minus_g = _mm512_set1_ps(-g);
      for (int64_t i = 0; i < vocab; i += 16) {
        const __mmask16 m = tail_mask(vocab - i);
        const __m512 shifted = _mm512_sub_ps(_mm512_mul_ps(load_row(row + i, m), scale), lse_v);
        store_row(out_row + i, _mm512_mul_ps(exp16(shifted), minus_g), m);
      }
      const int64_t t = tokens[r];
      set_at(out_row + t, g - g * std::exp(value_at(row + t) * inv_temperature - lse[r]));
    }
  });
}

std::vector<torch::Tensor> token_logprobs_forward(torch::Tensor logits, torch::Tensor tokens, double temperature) {
  check_inputs(logits, tokens);
  TORCH_CHECK(temperature > 0.0, "temperature: expected > 0, got ", temperature);
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  auto options = logits.options().dtype(at::kFloat);
  auto logprobs = torch::empty({rows}, options), entropy = torch::empty({rows}, options);
  auto lse = torch::empty({rows}, options);
  const float inv_t = static_cast<float>(1.0 / temperature);
  if (logits.scalar_type() == at::kBFloat16)
    forward_rows(raw(logits), tokens.data_ptr<int64_t>(), rows, vocab, inv_t, logprobs.data_ptr<float>(),
                 entropy.data_ptr<float>(), lse.data_ptr<float>());
  else
    forward_rows(logits.data_ptr<float>(), tokens.data_ptr<int64_t>(), rows, vocab, inv_t, logprobs.data_ptr<float>(),
                 entropy.data_ptr<float>(), lse.data_ptr<float>());
  return {logprobs, entropy, lse};
}

torch::Tensor token_logprobs_backward(torch::Tensor logits, torch::Tensor tokens, torch::Tensor lse,
                                      torch::Tensor grad, double temperature) {
  check_inputs(logits, tokens);
  TORCH_CHECK(temperature > 0.0, "temperature: expected > 0, got ", temperature);
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  for (const auto* t : {&lse, &grad})
    TORCH_CHECK(t->scalar_type() == at::kFloat && t->dim() == 1 && t->size(0) == rows && t->is_contiguous(),
                "lse and grad: expected contiguous (", rows, ",) fp32 tensors, got ", t->scalar_type(), " of shape ",
                t->sizes());
  auto out = torch::empty_like(logits);
  const float inv_t = static_cast<float>(1.0 / temperature);
  if (logits.scalar_type() == at::kBFloat16)
    backward_rows(raw(logits), tokens.data_ptr<int64_t>(), lse.data_ptr<float>(), grad.data_ptr<float>(), rows, vocab,
                  inv_t, raw_mut(out));
  else
    backward_rows(logits.data_ptr<float>(), tokens.data_ptr<int64_t>(), lse.data_ptr<float>(), grad.data_ptr<float>(),
                  rows, vocab, inv_t, out.data_ptr<float>());
  return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("token_logprobs_forward", &token_logprobs_forward,
        "log-prob of each row's token, the entropy and the logsumexp of softmax(logits / T): (R,) fp32 each",
        py::arg("logits"), py::arg("tokens"), py::arg("temperature"));
  m.def("token_logprobs_backward", &token_logprobs_backward,
        "gradient of the rows' token log-probs w.r.t. the logits, times grad (R,): (R, V) in the logits' dtype",
        py::arg("logits"), py::arg("tokens"), py::arg("lse"), py::arg("grad"), py::arg("temperature"));
}

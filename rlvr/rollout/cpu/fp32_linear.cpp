// x @ W^T + bias in fp32 for the few rows of a decode step, with AVX2 + FMA, straight from an nn.Linear's own
// (N, K) weight (no packed copy).
//
// At 16 rows a decode step's GEMMs are bound by streaming the weights from memory (4 bytes a parameter, read once a
// step) or by the FMA rate; a BLAS tuned for large matrices reaches neither there: on an AMD EPYC (AVX2, 2 threads)
// MKL's sgemm streamed SmolLM2's weights at ~3 GB/s. Here each thread takes a contiguous range of W's rows and
// streams it once: three rows of W at a time stay in L1 while every block of four rows of x is multiplied with them
// (12 fp32x8 accumulators, summed across lanes at the end), so W is read from memory once and x from cache.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>

#include <immintrin.h>

namespace {

inline float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

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

void check_fp32(const torch::Tensor& t, const char* name, int64_t dim) {
  TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == at::kFloat && t.dim() == dim && t.is_contiguous(), name,
              ": expected a contiguous ", dim, "-d fp32 CPU tensor, got ", t.scalar_type(), " of shape ", t.sizes(),
              t.is_contiguous() ? "" : " (not contiguous)");
}

// x (M, K) fp32, weight (N, K) fp32 (nn.Linear's layout), bias (N,) fp32 or None -> (M, N) fp32.
torch::Tensor fp32_linear(torch::Tensor x, torch::Tensor weight, c10::optional<torch::Tensor> bias) {
  check_fp32(x, "x", 2);
  check_fp32(weight, "weight", 2);
  const int64_t rows = x.size(0), k = x.size(1), n = weight.size(0);
  TORCH_CHECK(weight.size(1) == k, "weight: expected ", k, " input features (x's), got ", weight.size(1));
  const float* b_ptr = nullptr;
  if (bias.has_value()) {
    check_fp32(*bias, "bias", 1);
    TORCH_CHECK(bias->size(0) == n, "bias: expected ", n, " entries, got ", bias->size(0));
    b_ptr = bias->data_ptr<float>();
  }
  auto out = torch::empty({rows, n}, x.options());
  const float* x_ptr = x.data_ptr<float>();
  const float* w_ptr = weight.data_ptr<float>();
  float* o_ptr = out.data_ptr<float>();
  const int64_t triples = (n + 2) / 3;
  // grain: at least ~64 KB of weights a task, so a thread streams long contiguous runs
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, 3 * k));
  at::parallel_for(0, triples, grain, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t j = 3 * t;
      const float* w = w_ptr + j * k;
      const float* b = b_ptr != nullptr ? b_ptr + j : nullptr;
      const float* next = t + 1 < end && j + 6 <= n ? w + 3 * k : nullptr;
      switch (std::min<int64_t>(3, n - j)) {
        case 1: rows_block<1>(rows, x_ptr, k, w, b, o_ptr + j, n, next); break;
        case 2: rows_block<2>(rows, x_ptr, k, w, b, o_ptr + j, n, next); break;
        default: rows_block<3>(rows, x_ptr, k, w, b, o_ptr + j, n, next); break;
      }
    }
  });
  return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("fp32_linear", &fp32_linear, "x @ W^T + bias in fp32 for a few rows (AVX2 + FMA)", py::arg("x"),
        py::arg("weight"), py::arg("bias") = py::none());
}

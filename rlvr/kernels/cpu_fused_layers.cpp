// The element-wise layers of a Llama-style decoder, forward and backward, for training on a CPU
// (rlvr/kernels/cpu_fused_layers.py): RMSNorm and SwiGLU's silu(gate) * up, each one pass over its inputs forward and
// one backward, where transformers' modules make 4-10 passes of torch ops, each over a fresh allocation. AVX2 + FMA,
// so any x86 CPU torch runs AVX2 kernels on. Shapes: N rows, H features.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include <immintrin.h>

#include "avx2.h"

namespace {

using namespace rlvr_avx2;  // hsum, exp8, load8/store8, load1/store1, check_fp32 (avx2.h)

constexpr int64_t ELEMENTS_PER_TASK = 1 << 14;  // element-wise work split over threads in chunks this large

void check_like(const torch::Tensor& t, const torch::Tensor& like, const char* name) {
  TORCH_CHECK(t.device().is_cpu() && t.is_contiguous() && t.scalar_type() == like.scalar_type() &&
                  t.sizes() == like.sizes(),
              name, ": expected a contiguous ", like.scalar_type(), " CPU tensor of shape ", like.sizes(), ", got ",
              t.scalar_type(), " of shape ", t.sizes(), t.is_contiguous() ? "" : " (not contiguous)");
}

// ---- RMSNorm: y = weight * (x * r), r = rsqrt(mean(x^2) + eps) per row (transformers' LlamaRMSNorm in fp32) ----

// x (N, H) fp32, weight (H,) fp32 -> y (N, H) fp32, or bf16 rounded once from the fp32 result (what autocast's cast
// of an fp32 y gives, without a second pass), and r (N,) fp32 (kept for the backward).
template <typename T>
void rms_norm_forward_impl(const float* xp, const float* wp, T* yp, float* rp, int64_t n, int64_t h, float eps) {
  const int64_t vec = h / 8 * 8;
  at::parallel_for(0, n, 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float* row = xp + i * h;
      __m256 acc = _mm256_setzero_ps();
      for (int64_t j = 0; j < vec; j += 8) acc = _mm256_fmadd_ps(load8(row + j), load8(row + j), acc);
      float sum = hsum(acc);
      for (int64_t j = vec; j < h; ++j) sum += row[j] * row[j];
      const float r = 1.0f / std::sqrt(sum / static_cast<float>(h) + eps);
      rp[i] = r;
      const __m256 rv = _mm256_set1_ps(r);
      T* out = yp + i * h;
      for (int64_t j = 0; j < vec; j += 8)
        store8(out + j, _mm256_mul_ps(load8(wp + j), _mm256_mul_ps(load8(row + j), rv)));
      for (int64_t j = vec; j < h; ++j) store1(out + j, wp[j] * (row[j] * r));
    }
  });
}

std::vector<torch::Tensor> rms_norm_forward(torch::Tensor x, torch::Tensor weight, double eps, bool bf16_out) {
  check_fp32(x, "x", 2);
  check_fp32(weight, "weight", 1);
  const int64_t n = x.size(0), h = x.size(1);
  TORCH_CHECK(weight.size(0) == h, "weight: expected (", h, ",), got ", weight.sizes());
  auto y = torch::empty_like(x, bf16_out ? torch::kBFloat16 : torch::kFloat32);
  auto rstd = torch::empty({n}, x.options());
  const float* xp = x.data_ptr<float>();
  const float* wp = weight.data_ptr<float>();
  float* rp = rstd.data_ptr<float>();
  if (bf16_out)
    rms_norm_forward_impl(xp, wp, reinterpret_cast<uint16_t*>(y.data_ptr<at::BFloat16>()), rp, n, h,
                          static_cast<float>(eps));
  else
    rms_norm_forward_impl(xp, wp, y.data_ptr<float>(), rp, n, h, static_cast<float>(eps));
  return {y, rstd};
}

// grad (N, H) of y (fp32, or bf16 where y was), x and weight as forward, r (N,) from it -> grad_x (N, H) and
// grad_weight (H,), fp32:
//   grad_x = r * (weight * grad - x * r^2 * mean_j(weight_j grad_j x_j)),  grad_weight = sum_rows grad * x * r.
// grad_weight sums per thread, then over threads in order (the same bits for the same thread count).
template <typename T>
void rms_norm_backward_impl(const T* gp, const float* xp, const float* wp, const float* rp, float* gxp, float* pp,
                            int64_t n, int64_t h) {
  const int64_t vec = h / 8 * 8;
  const float inv_h = 1.0f / static_cast<float>(h);
  at::parallel_for(0, n, 16, [&](int64_t begin, int64_t end) {
    float* gw = pp + at::get_thread_num() * h;
    for (int64_t i = begin; i < end; ++i) {
      const T* g = gp + i * h;
      const float* row = xp + i * h;
      const float r = rp[i];
      const __m256 rv = _mm256_set1_ps(r);
      __m256 acc = _mm256_setzero_ps();
      for (int64_t j = 0; j < vec; j += 8) {
        const __m256 gv = load8(g + j), xv = load8(row + j);
        acc = _mm256_fmadd_ps(_mm256_mul_ps(load8(wp + j), gv), xv, acc);
        store8(gw + j, _mm256_fmadd_ps(_mm256_mul_ps(gv, xv), rv, load8(gw + j)));
      }
      float dot = hsum(acc);
      for (int64_t j = vec; j < h; ++j) {
        const float gj = load1(g + j);
        dot += wp[j] * gj * row[j];
        gw[j] += gj * row[j] * r;
      }
      const float c = r * r * dot * inv_h;
      const __m256 cv = _mm256_set1_ps(c);
      float* out = gxp + i * h;
      for (int64_t j = 0; j < vec; j += 8)
        store8(out + j, _mm256_mul_ps(rv, _mm256_fnmadd_ps(load8(row + j), cv, _mm256_mul_ps(load8(wp + j),
                                                                                               load8(g + j)))));
      for (int64_t j = vec; j < h; ++j) out[j] = r * (wp[j] * load1(g + j) - row[j] * c);
    }
  });
}

std::vector<torch::Tensor> rms_norm_backward(torch::Tensor grad, torch::Tensor x, torch::Tensor weight,
                                             torch::Tensor rstd) {
  check_fp32(x, "x", 2);
  TORCH_CHECK(grad.device().is_cpu() && grad.is_contiguous() && grad.sizes() == x.sizes() &&
                  (grad.scalar_type() == torch::kFloat32 || grad.scalar_type() == torch::kBFloat16),
              "grad: expected a contiguous fp32 or bf16 CPU tensor of shape ", x.sizes(), ", got ",
              grad.scalar_type(), " of shape ", grad.sizes(), grad.is_contiguous() ? "" : " (not contiguous)");
  check_fp32(weight, "weight", 1);
  const int64_t n = x.size(0), h = x.size(1);
  TORCH_CHECK(weight.size(0) == h, "weight: expected (", h, ",), got ", weight.sizes());
  check_fp32(rstd, "rstd", 1);
  TORCH_CHECK(rstd.size(0) == n, "rstd: expected (", n, ",), got ", rstd.sizes());
  auto grad_x = torch::empty_like(x);
  auto partial = torch::zeros({at::get_num_threads(), h}, x.options());
  const float* xp = x.data_ptr<float>();
  const float* wp = weight.data_ptr<float>();
  const float* rp = rstd.data_ptr<float>();
  if (grad.scalar_type() == torch::kBFloat16)
    rms_norm_backward_impl(reinterpret_cast<const uint16_t*>(grad.data_ptr<at::BFloat16>()), xp, wp, rp,
                           grad_x.data_ptr<float>(), partial.data_ptr<float>(), n, h);
  else
    rms_norm_backward_impl(grad.data_ptr<float>(), xp, wp, rp, grad_x.data_ptr<float>(), partial.data_ptr<float>(),
                           n, h);
  return {grad_x, partial.sum(0)};
}

// ---- SwiGLU: out = silu(gate) * up, silu(g) = g * s, s = sigmoid(g); in fp32, one rounding to bf16 at the end ----

inline __m256 sigmoid8(__m256 g) {
  const __m256 one = _mm256_set1_ps(1.0f);
  return _mm256_div_ps(one, _mm256_add_ps(one, exp8(_mm256_sub_ps(_mm256_setzero_ps(), g))));
}
inline float sigmoid1(float g) { return 1.0f / (1.0f + exp1(-g)); }

template <typename T>
void silu_mul_forward_impl(const T* gate, const T* up, T* out, int64_t count) {
  at::parallel_for(0, count, ELEMENTS_PER_TASK, [&](int64_t begin, int64_t end) {
    int64_t i = begin;
    for (; i + 8 <= end; i += 8) {
      const __m256 g = load8(gate + i);
      store8(out + i, _mm256_mul_ps(_mm256_mul_ps(g, sigmoid8(g)), load8(up + i)));
    }
    for (; i < end; ++i) {
      const float g = load1(gate + i);
      store1(out + i, g * sigmoid1(g) * load1(up + i));
    }
  });
}

// d up = grad * silu(g); d gate = grad * up * s * (1 + g * (1 - s)).
template <typename T>
void silu_mul_backward_impl(const T* grad, const T* gate, const T* up, T* grad_gate, T* grad_up, int64_t count) {
  at::parallel_for(0, count, ELEMENTS_PER_TASK, [&](int64_t begin, int64_t end) {
    const __m256 one = _mm256_set1_ps(1.0f);
    int64_t i = begin;
    for (; i + 8 <= end; i += 8) {
      const __m256 d = load8(grad + i), g = load8(gate + i);
      const __m256 s = sigmoid8(g);
      store8(grad_up + i, _mm256_mul_ps(d, _mm256_mul_ps(g, s)));
      const __m256 dsilu = _mm256_mul_ps(s, _mm256_fmadd_ps(g, _mm256_sub_ps(one, s), one));
      store8(grad_gate + i, _mm256_mul_ps(_mm256_mul_ps(d, load8(up + i)), dsilu));
    }
    for (; i < end; ++i) {
      const float d = load1(grad + i), g = load1(gate + i);
      const float s = sigmoid1(g);
      store1(grad_up + i, d * (g * s));
      store1(grad_gate + i, d * load1(up + i) * (s * (1.0f + g * (1.0f - s))));
    }
  });
}

void check_silu_mul(const torch::Tensor& gate) {
  TORCH_CHECK(gate.device().is_cpu() && gate.is_contiguous() &&
                  (gate.scalar_type() == at::kBFloat16 || gate.scalar_type() == at::kFloat),
              "gate: expected a contiguous bf16 or fp32 CPU tensor, got ", gate.scalar_type(), " of shape ",
              gate.sizes(), gate.is_contiguous() ? "" : " (not contiguous)");
}

inline const uint16_t* bits(const torch::Tensor& t) {
  return reinterpret_cast<const uint16_t*>(t.data_ptr<at::BFloat16>());
}
inline uint16_t* bits_mut(torch::Tensor& t) { return reinterpret_cast<uint16_t*>(t.data_ptr<at::BFloat16>()); }

// gate, up: the same shape, contiguous, both bf16 or both fp32 -> silu(gate) * up in their dtype.
torch::Tensor silu_mul_forward(torch::Tensor gate, torch::Tensor up) {
  check_silu_mul(gate);
  check_like(up, gate, "up");
  auto out = torch::empty_like(gate);
  if (gate.scalar_type() == at::kFloat)
    silu_mul_forward_impl(gate.data_ptr<float>(), up.data_ptr<float>(), out.data_ptr<float>(), gate.numel());
  else
    silu_mul_forward_impl(bits(gate), bits(up), bits_mut(out), gate.numel());
  return out;
}

// grad of the output, gate, up (as forward) -> [grad_gate, grad_up] in their dtype.
std::vector<torch::Tensor> silu_mul_backward(torch::Tensor grad, torch::Tensor gate, torch::Tensor up) {
  check_silu_mul(gate);
  check_like(up, gate, "up");
  check_like(grad, gate, "grad");
  auto grad_gate = torch::empty_like(gate);
  auto grad_up = torch::empty_like(gate);
  if (gate.scalar_type() == at::kFloat)
    silu_mul_backward_impl(grad.data_ptr<float>(), gate.data_ptr<float>(), up.data_ptr<float>(),
                           grad_gate.data_ptr<float>(), grad_up.data_ptr<float>(), gate.numel());
  else
    silu_mul_backward_impl(bits(grad), bits(gate), bits(up), bits_mut(grad_gate), bits_mut(grad_up), gate.numel());
  return {grad_gate, grad_up};
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("rms_norm_forward", &rms_norm_forward, "RMSNorm forward: (y, rstd)", py::arg("x"), py::arg("weight"),
        py::arg("eps"), py::arg("bf16_out") = false);
  m.def("rms_norm_backward", &rms_norm_backward, "RMSNorm backward: (grad_x, grad_weight)");
  m.def("silu_mul_forward", &silu_mul_forward, "silu(gate) * up");
  m.def("silu_mul_backward", &silu_mul_backward, "silu(gate) * up backward: (grad_gate, grad_up)");
}

"""rlvr's C++ CPU kernels and what chooses them, in one place: the sources (``*.cpp``, ``*.h``), their builder
(:mod:`.build`), the machine they run on and the timings measured on it once per machine (:mod:`.machine`,
:mod:`.timings`), and the Python around each kernel: the fused decode step (:mod:`.fused_decode`, bf16 AVX-512 and fp32
AVX2), the AVX2 decode GEMM (:mod:`.fp32_decode`), oneDNN-packed linear layers (:mod:`.packed_linear`), the hf engine's
one entry point to them (:mod:`.cpu_decode`), and the trainer's log-prob (:mod:`.cpu_logprobs`) and RMSNorm / SwiGLU
(:mod:`.cpu_fused_layers`) kernels.

Importing this package loads nothing: each module is imported where its kernel is used, and a kernel is built on its
first use on a machine (then cached).
"""

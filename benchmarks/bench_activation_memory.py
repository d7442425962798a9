"""Bytes autograd saves for backward in one micro-batch of the trainer's forward, against the count that `rlvr check`
uses (:mod:`rlvr.preflight.memory`), with and without gradient checkpointing.

    python benchmarks/bench_activation_memory.py [--model PATH] [--rows 4] [--prompt 96] [--response 32]

Default model: the embedded SmolLM2-135M-Instruct. Runs on a CPU in about a minute (1 thread). Prints one line per
setting; results measured here are in ``benchmarks/results/activation_memory.md``.
"""

from __future__ import annotations

import argparse

import torch

from rlvr.config import ModelConfig
from rlvr.models.loading import load_causal_lm, resolve_model_path
from rlvr.models.logprobs import response_logprobs
from rlvr.preflight.memory import block_activation_bytes_per_token
from rlvr.preflight.model_shape import model_shape

MIB = 2**20


def saved_bytes(model: torch.nn.Module, rows: int, prompt: int, response: int) -> int:
    """Bytes of the distinct storages autograd saves (parameters excluded) for one forward of the trainer's loss."""
    seq = prompt + response
    ids = torch.randint(0, 1000, (rows, seq))
    seen: dict[int, int] = {}
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        lp, _ = response_logprobs(model, ids, torch.ones_like(ids), response, temperature=1.0,
                                  autocast_dtype=torch.bfloat16)
    lp.sum().backward()
    return sum(n for ptr, n in seen.items() if ptr not in params)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="embedded:smollm2-135m-instruct")
    parser.add_argument("--rows", type=int, default=4)
    parser.add_argument("--prompt", type=int, default=96)
    parser.add_argument("--response", type=int, default=32)
    args = parser.parse_args()
    torch.set_num_threads(1)
    path = resolve_model_path(args.model)
    shape = model_shape(path)
    tokens = args.rows * (args.prompt + args.response)
    block = block_activation_bytes_per_token(shape, 2)
    logits = args.rows * args.response * shape.vocab * 2  # the saved bf16 logits (their gradient comes in backward)
    for ckpt in (False, True):
        model = load_causal_lm(path, ModelConfig(gradient_checkpointing=ckpt)).train(ckpt)
        measured = saved_bytes(model, args.rows, args.prompt, args.response)
        if ckpt:  # a fp32 hidden state per layer + one block; only the output layer's bf16 weight cast is saved
            count = shape.layers * tokens * shape.hidden * 4 + tokens * block + logits + 2 * shape.vocab * shape.hidden
        else:  # every block, plus the bf16 casts of every weight (saved by the matmuls)
            count = shape.layers * tokens * block + logits + 2 * shape.params
        print(f"gradient_checkpointing={ckpt}: saved {measured / MIB:.1f} MiB, counted {count / MIB:.1f} MiB "
              f"({100 * (count / measured - 1):+.1f}%)")


if __name__ == "__main__":
    main()

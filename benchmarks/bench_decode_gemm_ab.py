"""In-process A/B of the decode step's GEMM kernel: ``decode_kernels.cpp`` as it was at an older revision against
this tree's, both built here, alternated in one process over every projection of the embedded SmolLM2-135M's decode
step (30 layers' q/k/v, o, gate/up and down, then the output layer) in turn, as a decode step reads them: each
layer's weights come from memory, not from a cache warmed by the same GEMM just before.

    python benchmarks/bench_decode_gemm_ab.py --old-rev REV --rows 16 --kernel dot_linear --reps 15 --threads 2

Both builds read the same packed weights (:class:`rlvr.kernels.fused_decode.FusedDecoder`'s) and the same
random inputs of ``--rows`` rows; their outputs must be equal bit for bit (the same sums in the same order), which
is checked first; ``--plain-pages-before`` gives 'before' copies of the packs in torch's own allocations (4 KB pages
where ``/sys/kernel/mm/transparent_hugepage/enabled`` is not ``always``), as revisions before the decoder's
huge-page arena read them. Prints the median milliseconds of one decode step's GEMMs per build, the per-repetition ratio
after / before and the 1-minute load average, with the CPU. Builds go to a temporary folder (~1 min each).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from rlvr.kernels.build import DECODE_SOURCES  # noqa: E402

KERNEL_DIRS = ("rlvr/kernels", "rlvr/rollout/cpu")
"""Where the decode kernels' sources are: this tree's folder, then the one older revisions kept them in."""
SOURCES = tuple(path.name for path in DECODE_SOURCES)
"""The extension's source, then the headers it may include (an older revision may lack one)."""


def build_at(rev: str | None, folder: Path, name: str) -> ModuleType:
    """The decode kernels built from ``rev``'s sources (None: this tree's) as extension ``name``."""
    from torch.utils.cpp_extension import load

    from rlvr.kernels.build import CFLAGS

    src = folder / name
    src.mkdir()
    for file in SOURCES:
        if rev is None:
            text = (ROOT / KERNEL_DIRS[0] / file).read_text()
        else:
            shown = [subprocess.run(["git", "show", f"{rev}:{folder}/{file}"], cwd=ROOT, capture_output=True,
                                    text=True) for folder in KERNEL_DIRS]
            found = next((s for s in shown if s.returncode == 0), None)
            if found is None:
                if file == SOURCES[0]:
                    raise FileNotFoundError(f"{rev} has no {file} in {' or '.join(KERNEL_DIRS)}")
                continue
            text = found.stdout
        (src / file).write_text(text)
    return load(name=name, sources=[str(src / SOURCES[0])], extra_cflags=CFLAGS, build_directory=str(src),
                verbose=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old-rev", required=True, help="the git revision whose decode_kernels.cpp is 'before'")
    ap.add_argument("--rows", type=int, default=16, help="rows decoded at once (bench_vs_trl: 16; the demo: 64)")
    ap.add_argument("--kernel", choices=["dot_linear", "amx_linear"], default="dot_linear")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--plain-pages-before", action="store_true",
                    help="'before' reads copies of the packs on 4 KB pages (as revisions before the decoder's "
                         "huge-page arena allocated them); 'after' the arena's")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from machine import stamp
    from transformers import AutoModelForCausalLM

    from rlvr import cache_dir
    from rlvr.kernels.build import decode_kernels
    from rlvr.kernels.fused_decode import FusedDecoder
    from rlvr.models.embedded import embedded_model_dir

    with tempfile.TemporaryDirectory() as folder:
        builds = {"before": build_at(args.old_rev, Path(folder), "rlvr_decode_kernels_before"),
                  "after": build_at(None, Path(folder), "rlvr_decode_kernels_after")}
    model = AutoModelForCausalLM.from_pretrained(embedded_model_dir(cache_dir()), dtype=torch.bfloat16)
    decoder = FusedDecoder(model, decode_kernels(), gemm="amx" if args.kernel == "amx_linear" else "dot")
    gen = torch.Generator().manual_seed(0)
    inputs = {k: torch.randn(args.rows, k, generator=gen).bfloat16() for k in (576, 1536)}
    projections = [(p, inputs[p.linears[0].in_features]) for layer in decoder.layers
                   for p in (layer.qkv, layer.o, layer.gate_up, layer.down)] + [(decoder.lm_head, inputs[576])]
    packs = {"after": [p.packed for p, _ in projections]}
    packs["before"] = [pack.clone() for pack in packs["after"]] if args.plain_pages_before else packs["after"]
    for i, (projection, x) in enumerate(projections):
        before, after = (getattr(builds[b], args.kernel)(x, packs[b][i], projection.bias, projection.out_features)
                         for b in builds)
        if not torch.equal(before, after):
            sys.exit(f"outputs differ: {float((before.float() - after.float()).abs().max()):.3g} at most")

    def run(name: str) -> float:
        kernel = getattr(builds[name], args.kernel)
        t0 = time.perf_counter()
        for pack, (projection, x) in zip(packs[name], projections, strict=True):
            kernel(x, pack, projection.bias, projection.out_features)
        return time.perf_counter() - t0

    for name in builds:
        run(name)  # warm-up
    times: dict[str, list[float]] = {name: [] for name in builds}
    loads = []
    for rep in range(args.reps):
        for name in (list(builds) if rep % 2 == 0 else list(builds)[::-1]):
            times[name].append(run(name))
        loads.append(os.getloadavg()[0])
    ratios = [a / b for a, b in zip(times["after"], times["before"], strict=True)]
    print(f"{stamp()}; {args.threads} thread(s); {args.kernel}, {args.rows} rows, {len(projections)} GEMMs a step; "
          f"outputs equal; packs of 'before' on {'4 KB' if args.plain_pages_before else 'the same 2 MB'} pages")
    for name in builds:
        print(f"{name} ({'rev ' + args.old_rev if name == 'before' else 'this tree'}): median "
              f"{statistics.median(times[name]) * 1e3:.2f} ms of GEMMs a decode step")
    print(f"after / before per repetition: median {statistics.median(ratios):.2f} (min {min(ratios):.2f}, max "
          f"{max(ratios):.2f}); load 1-min median {statistics.median(loads):.1f}")


if __name__ == "__main__":
    main()

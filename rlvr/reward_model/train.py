"""Training a reward model (``rlvr rm train RECIPE.yaml -o RUN_DIR``): plain torch AdamW, one process, CPU or one GPU.

DeepSpeed is not used here: a reward model of the sizes this project trains on CPU fits one process, and the plain
loop keeps the data order, the keep-best copy and the HF save obvious. (ZeRO sharding of a large RM is the trainer
restructure's model-worker job.)

A step takes ``train.prompts_per_step`` prompt groups; every response is scored by one forward pass and all the
group's pairs are gathered from those scores (:func:`rlvr.reward_model.loss.bradley_terry_loss`). Micro-batches hold
whole groups, and the loss of each is divided by the step's pair count, so gradient accumulation gives exactly the
full step's mean loss. Held-out pairs are evaluated every ``train.eval_every`` steps and at the end; the model with the
best pairwise accuracy (lower loss breaks ties) is the one saved in ``RUN_DIR/model``.

Run directory: ``model/`` (HF format with the head), ``metrics.jsonl``, ``summary.json``, ``recipe.resolved.yaml``,
``eval_pairs.jsonl`` (the held-out pairs), ``plots/reward_vs_length.png``.
"""

from __future__ import annotations

import json
import random
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml

from rlvr.config import RewardModelRecipe
from rlvr.data.sources import DataError
from rlvr.reward_model.data import TokenizedGroup, load_preference_groups, split_groups, tokenize_groups
from rlvr.reward_model.loss import bradley_terry_loss
from rlvr.reward_model.metrics import expected_calibration_error, pairwise_accuracy, pearson
from rlvr.reward_model.model import RewardModel, pad_sequences


@dataclass
class PairEval:
    """Held-out results: metrics plus every scored response (for the reward-vs-length plot)."""

    metrics: dict[str, Any]
    rewards: list[float]
    lengths: list[int]
    """Response tokens (eos excluded when it was appended)."""


def micro_batches(groups: list[TokenizedGroup], max_sequences: int) -> list[list[TokenizedGroup]]:
    """Whole groups packed in order into micro-batches of at most ``max_sequences`` responses (a larger group goes
    alone: its pairs need all its scores in one graph)."""
    out: list[list[TokenizedGroup]] = []
    size = 0
    for g in groups:
        n = len(g.response_ids)
        if out and size + n <= max_sequences:
            out[-1].append(g)
            size += n
        else:
            out.append([g])
            size = n
    return out


def _pair_tensors(batch: list[TokenizedGroup]) -> tuple[list[list[int]], torch.Tensor, torch.Tensor]:
    """Flat sequences of a micro-batch and (P,) chosen / rejected indices into them."""
    sequences, chosen, rejected = [], [], []
    for g in batch:
        offset = len(sequences)
        sequences.extend(g.sequences)
        chosen.extend(offset + c for c, _ in g.pairs)
        rejected.extend(offset + r for _, r in g.pairs)
    return sequences, torch.tensor(chosen, dtype=torch.long), torch.tensor(rejected, dtype=torch.long)


def _autocast(device: torch.device, bf16: bool) -> torch.autocast:
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=bf16)


@torch.no_grad()
def evaluate_pairs(model: RewardModel, groups: list[TokenizedGroup], pad_id: int, *, micro_batch_size: int = 16,
                   bf16: bool = False, ece_bins: int = 10, margin: float = 0.0, eos_appended: bool = True
                   ) -> PairEval:
    """Pairwise accuracy, ECE (calibration of sigmoid(r_c - r_r)), Pearson(reward, response length), loss.

    Raises:
        ValueError: no pairs.
    """
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    diffs, losses, rewards, lengths = [], [], [], []
    try:
        for batch in micro_batches(groups, micro_batch_size):
            sequences, chosen, rejected = _pair_tensors(batch)
            ids, mask = pad_sequences(sequences, pad_id)
            with _autocast(device, bf16):
                scores = model(ids.to(device), mask.to(device)).float().cpu()
            out = bradley_terry_loss(scores, chosen, rejected, margin=margin)
            diffs.append(out.margin)
            losses.append(out.per_pair)
            rewards.extend(scores.tolist())
            lengths.extend(len(r) - int(eos_appended) for g in batch for r in g.response_ids)
    finally:
        model.train(was_training)
    if not diffs:
        raise ValueError("no held-out pairs to evaluate")
    diff = torch.cat(diffs)
    metrics = {
        "pairwise_accuracy": pairwise_accuracy(diff),
        "ece": expected_calibration_error(diff, ece_bins),
        "length_correlation": pearson(torch.tensor(rewards), torch.tensor(lengths, dtype=torch.float64)),
        "loss": float(torch.cat(losses).mean()),
        "mean_margin": float(diff.mean()),
        "reward_mean": float(torch.tensor(rewards).mean()),
        "reward_std": float(torch.tensor(rewards).std(correction=0)),
        "n_pairs": int(diff.numel()),
        "n_prompts": len(groups),
    }
    return PairEval(metrics, rewards, lengths)


def _lr_factor(step: int, total: int, warmup: int, schedule: str) -> float:
    """LR multiplier before optimizer step ``step`` (0-based): linear warm-up, then constant or linear decay to 0."""
    if warmup and step < warmup:
        return (step + 1) / warmup
    if schedule == "linear":
        return max(0.0, (total - step) / max(1, total - warmup))
    return 1.0


def _save_atomic(model: RewardModel, tokenizer: Any, target: Path, extra: dict[str, Any]) -> None:
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save(tmp, tokenizer, extra)
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)


def write_pairs(groups: list, path: Path) -> None:
    """Every pair of ``groups`` as a ``prompt``/``chosen``/``rejected`` JSONL row."""
    with path.open("w") as fh:
        for g in groups:
            for c, r in g.pairs:
                fh.write(json.dumps({"prompt": g.prompt, "chosen": g.responses[c], "rejected": g.responses[r]}) + "\n")


def load_recipe_groups(recipe: RewardModelRecipe) -> tuple[list, list]:
    """(train, eval) preference groups of the recipe (split by prompt unless ``data.eval_source`` is given)."""
    data = recipe.data
    groups = load_preference_groups(data.source.path, data.source._searched)
    if data.eval_source is not None:
        return groups, load_preference_groups(data.eval_source.path, data.eval_source._searched)
    return split_groups(groups, data.eval_fraction, recipe.seed)


def train_reward_model(recipe: RewardModelRecipe, run_dir: Path) -> dict[str, Any]:
    """Train, evaluate, keep the best, write the run directory; returns the summary (also ``summary.json``).

    Raises:
        DataError: unreadable or invalid preference data. ModelLoadError: the backbone does not load.
    """
    from rlvr.models.loading import load_tokenizer, resolve_model_path
    from rlvr.runs.metrics import MetricsLogger
    from rlvr.runs.plots import save_figure

    t0 = time.time()
    cfg = recipe.train
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    torch.manual_seed(recipe.seed)
    train_groups, eval_groups = load_recipe_groups(recipe)  # data errors before the model loads
    model_path = resolve_model_path(recipe.model.name)
    tokenizer = load_tokenizer(model_path, recipe.model)
    train_tok = tokenize_groups(train_groups, tokenizer, recipe.data.max_length, recipe.data.append_eos)
    eval_tok = tokenize_groups(eval_groups, tokenizer, recipe.data.max_length, recipe.data.append_eos)
    pad_id = int(tokenizer.pad_token_id)

    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "metrics.jsonl").unlink(missing_ok=True)  # a rerun into the same folder starts its metrics over
    write_pairs(eval_groups, run_dir / "eval_pairs.jsonl")  # so `rlvr rm eval` can re-score the held-out pairs
    (run_dir / "recipe.resolved.yaml").write_text(
        yaml.safe_dump(recipe.model_dump(mode="json"), sort_keys=False, width=120))
    model = RewardModel.from_backbone(model_path, revision=recipe.model.revision,
                                      trust_remote_code=recipe.model.trust_remote_code, seed=recipe.seed)
    print(f"reward model: {recipe.model.name} without its LM head, plus a new scalar head (score), initialised at "
          f"random", file=sys.stderr, flush=True)
    if recipe.model.gradient_checkpointing:
        model.hf.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if recipe.model.lora is not None:  # adapters on the trunk, the head trained whole; saved as an adapter folder
        model.add_lora(recipe.model.lora, base_name=recipe.model.name)
    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    model.to(device).train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)
    rng = random.Random(recipe.seed)
    plan: list[list[TokenizedGroup]] = []  # the groups of every optimizer step, all epochs
    for _ in range(cfg.epochs):
        order = list(train_tok)
        rng.shuffle(order)
        plan.extend(order[i:i + cfg.prompts_per_step] for i in range(0, len(order), cfg.prompts_per_step))
    total = len(plan)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: _lr_factor(s, total, cfg.warmup_steps, cfg.schedule))
    extra = {"backbone": recipe.model.name, "append_eos": recipe.data.append_eos,
             "max_length": recipe.data.max_length}
    logger = MetricsLogger(run_dir)
    best: PairEval | None = None
    best_step = 0
    history: list[dict[str, Any]] = []

    def evaluate() -> PairEval:
        return evaluate_pairs(model, eval_tok, pad_id, micro_batch_size=cfg.micro_batch_size, bf16=cfg.bf16,
                              ece_bins=cfg.ece_bins, margin=cfg.margin, eos_appended=recipe.data.append_eos)

    def run_eval(step: int) -> None:
        nonlocal best, best_step
        if not eval_tok:
            return
        result = evaluate()
        logger.log(step, {f"eval/{k}": v for k, v in result.metrics.items()})
        history.append({"step": step, **result.metrics})
        m = result.metrics
        better = best is None or (m["pairwise_accuracy"], -m["loss"]) > (
            best.metrics["pairwise_accuracy"], -best.metrics["loss"])
        if better:
            best, best_step = result, step
            _save_atomic(model, tokenizer, run_dir / "model", {**extra, "step": step, "eval": m})

    before = evaluate().metrics if eval_tok and cfg.eval_before else None  # the untrained model: a baseline
    if before:
        logger.log(0, {f"eval/{k}": v for k, v in before.items()})
    for step, groups in enumerate(plan, 1):
        # forward/backward per micro-batch of whole groups; each loss is over the step's pair count
        t_step = time.time()
        n_pairs = sum(len(g.pairs) for g in groups)
        loss_sum, acc_sum = 0.0, 0.0
        for batch in micro_batches(groups, cfg.micro_batch_size):
            sequences, chosen, rejected = _pair_tensors(batch)
            ids, mask = pad_sequences(sequences, pad_id)
            with _autocast(device, cfg.bf16):
                scores = model(ids.to(device), mask.to(device))
            out = bradley_terry_loss(scores.float().cpu(), chosen, rejected, margin=cfg.margin,
                                     label_smoothing=cfg.label_smoothing, num_pairs=n_pairs)
            out.loss.backward()
            loss_sum += float(out.loss.detach())
            acc_sum += float(out.accuracy) * len(chosen)
        grad_norm = torch.nn.utils.clip_grad_norm_(trainable, cfg.grad_clip or float("inf"))
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        logger.log(step, {"train/loss": loss_sum, "train/accuracy": acc_sum / n_pairs, "train/pairs": n_pairs,
                          "train/grad_norm": float(grad_norm), "train/lr": scheduler.get_last_lr()[0],
                          "time/step_s": time.time() - t_step})
        if cfg.eval_every and step % cfg.eval_every == 0 and step != total:
            run_eval(step)
    run_eval(total)
    if best is None:  # nothing held out: the last model is the one kept
        _save_atomic(model, tokenizer, run_dir / "model", {**extra, "step": total})
    logger.close()

    summary: dict[str, Any] = {
        "eval": best.metrics if best else None,
        "eval_before": before,
        "best_step": best_step if best else total,
        "eval_history": history,
        "steps": total,
        "train_pairs": sum(len(g.pairs) for g in train_tok),
        "train_prompts": len(train_tok),
        "model": str(run_dir / "model"),
        "device": str(device) if device.type != "cpu" else f"cpu ({torch.backends.cpu.get_cpu_capability()}, "
                                                            f"{torch.get_num_threads()} threads)",
        "wall_time_s": time.time() - t0,
    }
    if best is not None:
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        ax.scatter(best.lengths, best.rewards, s=10, alpha=0.6)
        corr = best.metrics["length_correlation"]
        ax.set_xlabel("response length (tokens)")
        ax.set_ylabel("reward")
        ax.set_title(f"held-out responses (Pearson r = {corr:.3f})" if corr is not None else "held-out responses")
        ax.grid(alpha=0.3)
        summary["plot"] = str(save_figure(fig, run_dir / "plots" / "reward_vs_length.png",
                                          f"reward model at step {best_step}"))
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def evaluate_saved(path: str | Path, file: str | Path, micro_batch_size: int = 16, bf16: bool = False,
                   ece_bins: int = 10) -> dict[str, Any]:
    """``rlvr rm eval``: a saved reward model (folder or run directory) on a file of preference rows.

    Raises:
        FileNotFoundError: no reward model at ``path``. DataError: a bad preference file.
    """
    from transformers import AutoTokenizer

    from rlvr.reward_model.model import MARKER, resolve_reward_model_dir

    folder = resolve_reward_model_dir(path)
    info = json.loads((folder / MARKER).read_text())
    tokenizer = AutoTokenizer.from_pretrained(folder)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    groups = load_preference_groups(file)
    toks = tokenize_groups(groups, tokenizer, int(info.get("max_length", 512)), bool(info.get("append_eos", True)))
    if not any(g.pairs for g in toks):
        raise DataError(f"{file}: no pairs to evaluate")
    model = RewardModel.load(folder)
    result = evaluate_pairs(model, toks, int(tokenizer.pad_token_id), micro_batch_size=micro_batch_size, bf16=bf16,
                            ece_bins=ece_bins, eos_appended=bool(info.get("append_eos", True)))
    return {"model": str(folder), "file": str(file), **result.metrics}

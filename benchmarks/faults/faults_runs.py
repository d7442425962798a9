"""Faults of a run's life: the same seed giving the same run, kills and interrupts at several points, damaged
checkpoints and run folders, and a full disk. Where the claim is that nothing finished is lost, the run is continued
(``--resume``, ``--resume-from``) and compared with the unbroken baseline run by ``scripts/compare_runs.py``: metrics
step for step, samples, and the final weights."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

from bench import Bench, fault
from harness import (
    Check,
    before_model_load,
    checkpoint_state,
    exit_code,
    file_check,
    leftovers,
    metrics_steps,
    no_traceback,
    nothing_left,
    one_error_line,
    output_has,
    same_run,
)

RESUME_SAME = "`--resume` then finishes it with metrics, samples and weights equal to the unbroken run's"
REDONE = "the steps after the newest checkpoint (redone on resume, same numbers)"


def _resume_equals_baseline(b: Bench, run: Path) -> list[Check]:
    r = b.train(b.baseline_recipe(), run, "--resume")
    return [exit_code(r, 0), no_traceback(r), same_run(b.python, run, b.baseline())]


def _cache_env(b: Bench, name: str) -> dict[str, str]:
    """An rlvr cache of its own (``RLVR_CACHE``), empty at first; the built CPU kernels stay where they are."""
    root = Path(os.environ.get("RLVR_CACHE") or Path.home() / ".cache" / "rlvr")
    built = os.environ.get("TORCH_EXTENSIONS_DIR") or str(root / "torch_extensions")
    return {"RLVR_CACHE": str(b.work / "caches" / name), "TORCH_EXTENSIONS_DIR": built}


MEASURED = r"measured, saved to"


# ============================================================================================ same seed, same run
@fault("cold cache: first run on a machine", "same-run",
       "with an empty rlvr cache (kernel timings measured at start) the run equals the baseline run: same metrics, "
       "samples and weights")
def cold_cache(b: Bench) -> list[Check]:
    run = b.run_dir("cold-a")
    r = b.train(b.baseline_recipe(), run, env=_cache_env(b, "a"))
    return [exit_code(r, 0), output_has(r, MEASURED, "the cache was cold (a timing was measured)"),
            same_run(b.python, run, b.baseline())]


@fault("cold cache: a second cold cache", "same-run",
       "a second run on another empty cache equals the baseline run too (a timed kernel choice changes no number)")
def cold_cache_again(b: Bench) -> list[Check]:
    run = b.run_dir("cold-b")
    r = b.train(b.baseline_recipe(), run, env=_cache_env(b, "b"))
    return [exit_code(r, 0), output_has(r, MEASURED, "the cache was cold (a timing was measured)"),
            same_run(b.python, run, b.baseline())]


@fault("warm cache after a cold one", "same-run",
       "the run on the cache the cold run filled reads its timings and equals the baseline run")
def warm_cache(b: Bench) -> list[Check]:
    if not (b.work / "caches" / "a").is_dir():
        cold_cache(b)
    run = b.run_dir("warm-a")
    r = b.train(b.baseline_recipe(), run, env=_cache_env(b, "a"))
    return [exit_code(r, 0), Check("the cache was warm (nothing measured)", re.search(MEASURED, r.out) is None),
            same_run(b.python, run, b.baseline())]


def _auto_precision(b: Bench, name: str, cache: str):
    recipe = b.fx.recipe("auto-precision", trainer={"precision": "auto", "steps": 2, "save_every": 0})
    run = b.run_dir(name)
    return run, b.train(recipe, run, env=_cache_env(b, cache))


@fault("cold cache, trainer.precision auto: two machines' first runs", "same-run",
       "with precision auto (measured on an empty cache: bf16 or fp32 per stage) two cold-cache runs are the same run")
def cold_cache_auto(b: Bench) -> list[Check]:
    first, r1 = _auto_precision(b, "auto-cold-a", "auto-a")
    second, r2 = _auto_precision(b, "auto-cold-b", "auto-b")
    chosen = [re.search(r"\[rlvr\] precision .*", r.out) for r in (r1, r2)]
    return [exit_code(r1, 0), exit_code(r2, 0),
            Check("both measured the precision", all(re.search(MEASURED, r.out) for r in (r1, r2)),
                  " / ".join(m.group(0)[:90] for m in chosen if m)),
            same_run(b.python, second, first)]


@fault("warm cache, trainer.precision auto", "same-run",
       "the precision-auto run on the cache its cold run filled equals that cold run")
def warm_cache_auto(b: Bench) -> list[Check]:
    if not (b.runs / "auto-cold-a").is_dir():
        _auto_precision(b, "auto-cold-a", "auto-a")
    warm, r = _auto_precision(b, "auto-warm-a", "auto-a")
    return [exit_code(r, 0), same_run(b.python, warm, b.runs / "auto-cold-a")]


def _with_metric(run: Path, step: int, key: str, value: float) -> None:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    out = []
    for line in lines:
        record = json.loads(line)
        if record.get("step") == step and key in record:
            record[key] = value
        out.append(json.dumps(record))
    (run / "metrics.jsonl").write_text("\n".join(out) + "\n")


def _compare(b: Bench, x: Path, y: Path) -> subprocess.CompletedProcess:
    return subprocess.run([b.python, "scripts/compare_runs.py", str(x), str(y)], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2])


@fault("compare_runs: a run with a NaN metric against itself", "same-run",
       "`scripts/compare_runs.py RUN RUN` exits 0 when a metric of RUN is NaN")
def compare_nan(b: Bench) -> list[Check]:
    run = b.copy(b.baseline(), "nan-metric")
    _with_metric(run, 2, "reward/std", math.nan)
    done = _compare(b, run, run)
    return [Check("exit 0 (the same run)", done.returncode == 0, f"exit {done.returncode}: "
                  f"{(done.stdout + done.stderr).strip()[:120]}")]


@fault("compare_runs: a metric changed in its 7th digit, or NaN for a number", "same-run",
       "`scripts/compare_runs.py` still calls such runs different (exit 1, naming the key)")
def compare_differs(b: Bench) -> list[Check]:
    base = b.baseline()
    nudged, nan = b.copy(base, "nudged-metric"), b.copy(base, "nan-for-number")
    value = next(json.loads(line)["reward/mean"] for line in (base / "metrics.jsonl").read_text().splitlines()
                 if json.loads(line).get("step") == 3)
    _with_metric(nudged, 3, "reward/mean", value * (1 + 1e-7))
    _with_metric(nan, 3, "reward/mean", math.nan)
    checks = []
    for run in (nudged, nan):
        done = _compare(b, base, run)
        out = (done.stdout + done.stderr).strip()
        checks.append(Check(f"{run.name}: exit 1 naming reward/mean", done.returncode == 1 and "reward/mean" in out,
                            f"exit {done.returncode}: {out.splitlines()[0][:100] if out else ''}"))
    return checks


# ======================================================================================================== kills
@fault("kill -9 during start-up (pre-flight done, model not loaded)", "kill",
       "a rerun of the same command trains (or says in one line to pass --overwrite); the run then equals the "
       "baseline run", data_lost="none (nothing was finished)")
def kill_at_startup(b: Bench) -> list[Check]:
    run = b.run_dir("kill-startup")
    r = b.train(b.baseline_recipe(), run, kill_on=r"^pre-flight checks")
    checks = [exit_code(r, -9), nothing_left(r.tag)]
    again = b.train(b.baseline_recipe(), run)
    if again.code != 0:
        checks += [one_error_line(again, "--overwrite"), no_traceback(again)]
        again = b.train(b.baseline_recipe(), run, "--overwrite")
    return checks + [exit_code(again, 0), same_run(b.python, run, b.baseline())]


@fault("kill -9 before the first checkpoint (in step 2)", "kill",
       "a plain rerun and `--resume` each say in one line, before the model loads, that the run stopped before its "
       "first checkpoint and to pass --overwrite; `--overwrite` then gives the baseline run",
       data_lost="the steps done (no checkpoint yet; the run starts over)")
def kill_before_first_checkpoint(b: Bench) -> list[Check]:
    run = b.run_dir("kill-before-ckpt")
    r = b.train(b.baseline_recipe(), run, kill_on=r"^step 1/4", env=b.slow_steps())
    checks = [exit_code(r, -9), file_check("no checkpoint was written", not list(run.glob("checkpoints/step-*"))),
              nothing_left(r.tag)]
    rerun = b.train(b.baseline_recipe(), run)
    resume = b.train(b.baseline_recipe(), run, "--resume")
    for name, x in (("rerun", rerun), ("--resume", resume)):
        checks += [exit_code(x, 2), one_error_line(x, "before its first", "--overwrite"), before_model_load(x),
                   no_traceback(x)]
        checks[-4].what = f"{name}: {checks[-4].what}"
    over = b.train(b.baseline_recipe(), run, "--overwrite")
    return checks + [exit_code(over, 0), same_run(b.python, run, b.baseline())]


@fault("kill -9 in the last step (after checkpoint step-2)", "kill",
       "no process is left; the run's checkpoint step-2 is whole; " + RESUME_SAME, data_lost=REDONE)
def kill_in_last_step(b: Bench) -> list[Check]:
    state = b.killed_in_step_4()
    made = b.made["killed-in-step-4"]
    run = b.copy(state, "kill-step-4")
    return [exit_code(made, -9), nothing_left(made.tag),
            file_check("checkpoint step-2 whole", checkpoint_state(run / "checkpoints/step-2") == "whole",
                       checkpoint_state(run / "checkpoints/step-2"))] + _resume_equals_baseline(b, run)


@fault("Ctrl-C (SIGINT to the process group) before the first checkpoint", "kill",
       "exit 130 with one line: the step reached, no checkpoint, the --overwrite command; no traceback",
       data_lost="the steps done (no checkpoint yet)")
def ctrl_c_before_checkpoint(b: Bench) -> list[Check]:
    run = b.run_dir("ctrl-c-early")
    r = b.train(b.baseline_recipe(), run, kill_on=r"^step 1/4", kill_signal=signal.SIGINT, kill_group=True,
                env=b.slow_steps())
    return [exit_code(r, 130), output_has(r, r"^interrupted at step \d of 4; no checkpoint was written: .*--overwrite",
                                          "one line naming --overwrite"),
            no_traceback(r), nothing_left(r.tag)]


@fault("Ctrl-C in the last step", "kill",
       "exit 130 with one line naming checkpoint step-2 and the --resume command; " + RESUME_SAME, data_lost=REDONE)
def ctrl_c_in_last_step(b: Bench) -> list[Check]:
    run = b.run_dir("ctrl-c-late")
    r = b.train(b.baseline_recipe(), run, kill_on=r"^step 3/4", kill_signal=signal.SIGINT, kill_group=True,
                env=b.slow_steps())
    return [exit_code(r, 130), output_has(r, r"^interrupted at step 3 of 4; the newest checkpoint is step-2: .*--resume",
                                          "one line naming step-2 and --resume"),
            no_traceback(r), nothing_left(r.tag)] + _resume_equals_baseline(b, run)


@fault("SIGTERM in the last step", "kill",
       "the trainer ends without a traceback and leaves no process; " + RESUME_SAME, data_lost=REDONE)
def sigterm_in_last_step(b: Bench) -> list[Check]:
    run = b.run_dir("sigterm")
    r = b.train(b.baseline_recipe(), run, kill_on=r"^step 3/4", kill_signal=signal.SIGTERM, env=b.slow_steps())
    return [Check("ended by the signal", r.code != 0 and not r.timed_out, f"exit {r.code}"), no_traceback(r),
            nothing_left(r.tag)] + _resume_equals_baseline(b, run)


def _injected_kill(b: Bench, name: str, how: list[str], *extra: str, run: Path | None = None):
    run = run or b.run_dir(name)
    r = b.cli.injected(how, "train", str(b.baseline_recipe()), "-o", str(run), *extra)
    return run, r


@fault("kill -9 while a checkpoint is saved (its files written, manifest not yet)", "kill",
       "the half-saved checkpoint never counts: `--resume` continues from step-2, removes the partial folder and "
       "gives the baseline run", data_lost=REDONE)
def kill_in_checkpoint_save(b: Bench) -> list[Check]:
    run, r = _injected_kill(b, "kill-ckpt-save", ["--kill-calling", "rlvr.runs.checkpoint:write_manifest", "--nth", "2"])
    checks = [exit_code(r, -9), file_check("a partial checkpoint folder was left", (run / "checkpoints/.tmp-step-4")
                                           .is_dir(), str(sorted(p.name for p in (run / "checkpoints").iterdir())))]
    checks += _resume_equals_baseline(b, run)
    return checks + [file_check("no partial folder after the resume", not leftovers(run), str(leftovers(run)))]


@fault("kill -9 halfway through writing a checkpoint's model-state file", "kill",
       "`--resume` continues from step-2 and gives the baseline run", data_lost=REDONE)
def kill_in_model_state_write(b: Bench) -> list[Check]:
    run, r = _injected_kill(b, "kill-ckpt-state", ["--kill-writing", r"mp_rank_00_model_states\.pt$", "--nth", "2"])
    return [exit_code(r, -9)] + _resume_equals_baseline(b, run)


@fault("kill -9 halfway through a metrics.jsonl append (step 3's line)", "kill",
       "`--resume` drops the torn line with a warning naming metrics.jsonl and its line, then gives the baseline run",
       data_lost="the torn line; its step is redone")
def kill_in_metrics_append(b: Bench) -> list[Check]:
    run, r = _injected_kill(b, "kill-metrics-append", ["--kill-writing", r"^metrics\.jsonl$", "--nth", "3"])
    torn = (run / "metrics.jsonl").read_text().splitlines()[-1:] if (run / "metrics.jsonl").exists() else []
    checks = [exit_code(r, -9), file_check("the last line is torn", bool(torn) and not torn[0].endswith("}"),
                                           torn[0][-40:] if torn else "no file")]
    resume = b.train(b.baseline_recipe(), run, "--resume")
    return checks + [exit_code(resume, 0), output_has(resume, r"metrics\.jsonl:3", "a warning naming metrics.jsonl:3"),
                     no_traceback(resume), same_run(b.python, run, b.baseline())]


@fault("kill -9 halfway through samples/step-3.jsonl", "kill",
       "no truncated samples file is left; " + RESUME_SAME, data_lost=REDONE)
def kill_in_samples_write(b: Bench) -> list[Check]:
    run, r = _injected_kill(b, "kill-samples", ["--kill-writing", r"step-3\.jsonl"])
    return [exit_code(r, -9), file_check("samples/step-3.jsonl not there (only a temporary file)",
                                         not (run / "samples/step-3.jsonl").exists())] + _resume_equals_baseline(b, run)


@fault("kill -9 halfway through summary.json", "kill",
       "summary.json is absent, never truncated; " + RESUME_SAME, data_lost="none (step-4 is whole; the summary is "
       "written again)")
def kill_in_summary_write(b: Bench) -> list[Check]:
    run, r = _injected_kill(b, "kill-summary", ["--kill-writing", r"summary\.json"])
    checks = [exit_code(r, -9), file_check("no truncated summary.json", not (run / "summary.json").exists())]
    checks += _resume_equals_baseline(b, run)
    try:
        json.loads((run / "summary.json").read_text())
        ok = True
    except (OSError, ValueError):
        ok = False
    return checks + [file_check("summary.json whole after the resume", ok)]


@fault("kill -9 halfway through the plot (plots/curves.png)", "kill",
       "no truncated PNG is left; " + RESUME_SAME, data_lost="none (the plot is drawn again)")
def kill_in_plot_write(b: Bench) -> list[Check]:
    run, r = _injected_kill(b, "kill-plot", ["--kill-writing", r"curves\.png"])
    png = run / "plots/curves.png"
    checks = [exit_code(r, -9), file_check("no truncated curves.png", not png.exists())]
    checks += _resume_equals_baseline(b, run)
    return checks + [file_check("curves.png whole after the resume", png.is_file() and
                                png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.read_bytes()[-8:-4] == b"IEND")]


@fault("kill -9 during --resume's rewrite of metrics.jsonl", "kill",
       "metrics.jsonl is left as it was; the next `--resume` removes the dead writer's temporary file and gives the "
       "baseline run", data_lost=REDONE)
def kill_in_metrics_rewrite(b: Bench) -> list[Check]:
    run = b.copy(b.killed_in_step_4(), "kill-metrics-rewrite")
    before = (run / "metrics.jsonl").read_bytes()
    _, r = _injected_kill(b, "", ["--kill-writing", r"^\.metrics\.jsonl\.tmp-"], "--resume", run=run)
    checks = [exit_code(r, -9), file_check("metrics.jsonl unchanged", (run / "metrics.jsonl").read_bytes() == before),
              file_check("the killed writer's temporary file is there", bool(list(run.glob(".metrics.jsonl.tmp-*"))),
                         str(leftovers(run)))]
    checks += _resume_equals_baseline(b, run)
    return checks + [file_check("no temporary file after the resume", not leftovers(run), str(leftovers(run)))]


# ================================================================================ damaged checkpoints and folders
def _continue(b: Bench, run: Path):
    """Train a finished copy of the baseline run further: its newest checkpoint (step-4) is loaded."""
    return b.train(b.baseline_recipe(), run, "--resume", "--set", "trainer.steps=6", "--allow-changed", "trainer.steps")


def _refused(r, *needles: str) -> list[Check]:
    return [exit_code(r, 2), one_error_line(r, *needles), before_model_load(r), no_traceback(r)]


def _recovers_from_step_2(b: Bench, run: Path) -> list[Check]:
    r = b.train(b.baseline_recipe(), run, "--resume-from", str(run / "checkpoints/step-2"))
    return [exit_code(r, 0), same_run(b.python, run, b.baseline())]


STATE = "deepspeed/state/mp_rank_00_model_states.pt"
OFFER = r"--resume-from step-2"


@fault("checkpoint missing rng-rank0.pt", "checkpoint",
       "one line before the model loads naming rng-rank0.pt and the newest whole checkpoint (--resume-from step-2); "
       "resuming from it gives the baseline run", data_lost="the steps after step-2 (redone)")
def ckpt_missing_rng(b: Bench) -> list[Check]:
    run = b.copy(b.baseline(), "ckpt-no-rng")
    (run / "checkpoints/step-4/rng-rank0.pt").unlink()
    return _refused(_continue(b, run), "rng-rank0.pt", OFFER) + _recovers_from_step_2(b, run)


@fault("checkpoint's model-state file truncated to half", "checkpoint",
       "one line before the model loads naming the file and --resume-from step-2; resuming from it gives the baseline "
       "run", data_lost="the steps after step-2 (redone)")
def ckpt_truncated_state(b: Bench) -> list[Check]:
    run = b.copy(b.baseline(), "ckpt-truncated")
    path = run / "checkpoints/step-4" / STATE
    os.truncate(path, path.stat().st_size // 2)
    return _refused(_continue(b, run), "mp_rank_00_model_states.pt", OFFER) + _recovers_from_step_2(b, run)


@fault("checkpoint's model-state file missing", "checkpoint",
       "one line before the model loads naming the file and --resume-from step-2",
       data_lost="the steps after step-2 (redone)")
def ckpt_missing_state(b: Bench) -> list[Check]:
    run = b.copy(b.baseline(), "ckpt-no-state")
    (run / "checkpoints/step-4" / STATE).unlink()
    return _refused(_continue(b, run), "mp_rank_00_model_states.pt", OFFER)


@fault("checkpoint's model-state file overwritten with zeros (same size)", "checkpoint",
       "one line before the model loads naming the file and --resume-from step-2 (a size check cannot see this: "
       "content must be checked)", data_lost="the steps after step-2 (redone)")
def ckpt_zeroed_state(b: Bench) -> list[Check]:
    run = b.copy(b.baseline(), "ckpt-zeroed")
    path = run / "checkpoints/step-4" / STATE
    path.write_bytes(bytes(path.stat().st_size))
    return _refused(_continue(b, run), "mp_rank_00_model_states.pt", OFFER)


@fault("checkpoint missing trainer_state.json", "checkpoint",
       "one line before the model loads naming trainer_state.json and --resume-from step-2",
       data_lost="the steps after step-2 (redone)")
def ckpt_missing_trainer_state(b: Bench) -> list[Check]:
    run = b.copy(b.baseline(), "ckpt-no-trainer-state")
    (run / "checkpoints/step-4/trainer_state.json").unlink()
    return _refused(_continue(b, run), "trainer_state.json", OFFER)


@fault("checkpoint's manifest.json truncated", "checkpoint",
       "one line before the model loads naming manifest.json and --resume-from step-2",
       data_lost="the steps after step-2 (redone)")
def ckpt_bad_manifest(b: Bench) -> list[Check]:
    run = b.copy(b.baseline(), "ckpt-bad-manifest")
    path = run / "checkpoints/step-4/manifest.json"
    os.truncate(path, 20)
    return _refused(_continue(b, run), "manifest.json", OFFER)


@fault("checkpoint's exported model/model.safetensors truncated", "checkpoint",
       "one line before the model loads naming model/model.safetensors and --resume-from step-2",
       data_lost="the steps after step-2 (redone)")
def ckpt_truncated_export(b: Bench) -> list[Check]:
    run = b.copy(b.baseline(), "ckpt-truncated-export")
    path = run / "checkpoints/step-4/model/model.safetensors"
    os.truncate(path, 100)
    return _refused(_continue(b, run), "model.safetensors", OFFER)


@fault("every checkpoint of the run damaged", "checkpoint",
       "one line before the model loads: no checkpoint is whole, start again with --overwrite",
       data_lost="the run (no whole checkpoint)")
def ckpt_all_damaged(b: Bench) -> list[Check]:
    run = b.copy(b.baseline(), "ckpt-all-damaged")
    for step in (2, 4):
        (run / f"checkpoints/step-{step}/rng-rank0.pt").unlink()
    return _refused(_continue(b, run), "--overwrite")


@fault("leftovers of a dead writer (.NAME.tmp-PID files, a checkpoints/.tmp-step-N folder)", "checkpoint",
       "`--resume` removes them at start; " + RESUME_SAME, data_lost=REDONE)
def stale_leftovers(b: Bench) -> list[Check]:
    run = b.copy(b.killed_in_step_4(), "stale-leftovers")
    dead = subprocess.Popen(["true"])
    dead.wait()  # its pid names no process now
    (run / "checkpoints/.tmp-step-4/deepspeed").mkdir(parents=True)
    for rel in (f".summary.json.tmp-{dead.pid}", f"samples/.step-3.jsonl.tmp-{dead.pid}",
                f".metrics.jsonl.tmp-{dead.pid}"):
        (run / rel).write_text("half a fi")
    checks = _resume_equals_baseline(b, run)
    return checks + [file_check("no leftover after the resume", not leftovers(run), str(leftovers(run)))]


@fault("metrics.jsonl with a line of garbage before its last", "checkpoint",
       "`--resume` stops before the model loads with one line naming metrics.jsonl:2; the file is left as it was",
       data_lost="none (the file is the user's to fix)")
def metrics_garbage_line(b: Bench) -> list[Check]:
    run = b.copy(b.killed_in_step_4(), "metrics-garbage")
    lines = (run / "metrics.jsonl").read_text().splitlines(keepends=True)
    lines[1] = "{this is not json\n"
    (run / "metrics.jsonl").write_text("".join(lines))
    before = (run / "metrics.jsonl").read_bytes()
    r = b.train(b.baseline_recipe(), run, "--resume")
    return _refused(r, r"metrics\.jsonl:2") + [file_check("metrics.jsonl unchanged",
                                                             (run / "metrics.jsonl").read_bytes() == before)]


@fault("recipe.resolved.yaml deleted from a run, then --resume", "checkpoint",
       "the resume says that recipe.resolved.yaml is missing (the recipe cannot be checked against the run's): one "
       "error line before the model loads, or a warning before it goes on", data_lost="none")
def resolved_recipe_deleted(b: Bench) -> list[Check]:
    run = b.copy(b.killed_in_step_4(), "no-resolved-recipe")
    (run / "recipe.resolved.yaml").unlink()
    r = b.train(b.baseline_recipe(), run, "--resume")
    return [exit_code(r, 0, 2), output_has(r, r"recipe\.resolved\.yaml", "a line naming recipe.resolved.yaml"),
            no_traceback(r)]


@fault("--resume with a changed optimizer value (optim.lr)", "checkpoint",
       "one line before the model loads naming optim.lr (the checkpoint's optimizer state decides it)",
       data_lost="none")
def resume_changed_lr(b: Bench) -> list[Check]:
    run = b.copy(b.killed_in_step_4(), "changed-lr")
    return _refused(b.train(b.baseline_recipe(), run, "--resume", "--set", "optim.lr=0.1"), r"optim\.lr")


@fault("--resume with a changed recipe value (rollout.temperature)", "checkpoint",
       "one line before the model loads naming rollout.temperature and --allow-changed", data_lost="none")
def resume_changed_recipe(b: Bench) -> list[Check]:
    run = b.copy(b.killed_in_step_4(), "changed-recipe")
    return _refused(b.train(b.baseline_recipe(), run, "--resume", "--set", "rollout.temperature=0.5"),
                    r"rollout\.temperature", "--allow-changed")


@fault("--resume-from a checkpoint that does not exist", "checkpoint",
       "one line before the model loads naming the checkpoint", data_lost="none")
def resume_from_missing(b: Bench) -> list[Check]:
    run = b.copy(b.killed_in_step_4(), "resume-from-missing")
    r = b.train(b.baseline_recipe(), run, "--resume-from", str(run / "checkpoints/step-3"))
    return _refused(r, "step-3")


@fault("a plain rerun into a finished run's folder", "checkpoint",
       "one line naming --resume and --overwrite; nothing in the folder is touched", data_lost="none")
def rerun_into_finished(b: Bench) -> list[Check]:
    run = b.copy(b.baseline(), "rerun-finished")
    before = (run / "metrics.jsonl").read_bytes()
    r = b.train(b.baseline_recipe(), run)
    return _refused(r, "--resume", "--overwrite") + [
        file_check("metrics.jsonl untouched", (run / "metrics.jsonl").read_bytes() == before)]


@fault("--resume of a complete run", "checkpoint",
       "exit 0 with one line saying the run is complete and how to train further; nothing loads", data_lost="none")
def resume_complete(b: Bench) -> list[Check]:
    run = b.copy(b.baseline(), "resume-complete")
    r = b.train(b.baseline_recipe(), run, "--resume")
    return [exit_code(r, 0), output_has(r, r"the run is complete .*nothing to resume"), before_model_load(r),
            no_traceback(r), same_run(b.python, run, b.baseline())]


# =================================================================================================== full disk
def _on_full_disk(b: Bench, run: Path, folder: str, size: str = "64k", copy_in: bool = True, fill: bool = True):
    """``--resume`` of ``run`` with ``run/folder`` on a tmpfs of ``size`` (its present files copied in, then filled
    to the last byte). Returns the result and the tmpfs's files as the command left them."""
    mountpoint = run / folder
    aside = b.work / "aside" / f"{run.name}-{folder}"
    if aside.exists():
        shutil.rmtree(aside)
    aside.parent.mkdir(exist_ok=True)
    mountpoint.mkdir(parents=True, exist_ok=True)
    shutil.copytree(mountpoint, aside)
    listing = b.work / "aside" / f"{run.name}-{folder}.listing"
    argv = [b.python, "-m", "rlvr.cli", "train", str(b.baseline_recipe()), "-o", str(run), "--resume"]
    r = b.cli.run(b.mounted(mountpoint, size, argv, fill=fill, copy_from=aside if copy_in else None, listing=listing))
    files = listing.read_text() if listing.exists() else ""
    return r, files


def _no_space_line(r) -> list[Check]:
    return [exit_code(r, 2), one_error_line(r, "(?i)space"), no_traceback(r)]


@fault("disk full while the plot is written (plots/ on a full filesystem)", "disk",
       "exit 2 with one line naming the full disk and where; metrics.jsonl and checkpoint step-4 whole; " + RESUME_SAME,
       data_lost="none (the plot is drawn again)", needs=("mount",))
def disk_full_plot(b: Bench) -> list[Check]:
    run = b.copy(b.killed_in_step_4(), "full-plot")
    r, files = _on_full_disk(b, run, "plots", copy_in=False)
    checks = _no_space_line(r) + [
        one_error_line(r, r"plots|curves\.png|" + re.escape(str(run))),
        file_check("metrics.jsonl holds steps 1-4", metrics_steps(run) == [1, 2, 3, 4], str(metrics_steps(run))),
        file_check("checkpoint step-4 whole", checkpoint_state(run / "checkpoints/step-4") == "whole",
                   checkpoint_state(run / "checkpoints/step-4")),
        file_check("no partial PNG on the full disk", "curves.png" not in files and ".tmp-" not in files, files.strip())]
    checks[3].what = "the error line names where the disk is full"
    return checks + _resume_equals_baseline(b, run)


@fault("disk full while a checkpoint is saved (checkpoints/ on a small filesystem)", "disk",
       "exit 2 with one line naming the folder, the free space and the size needed; no partial folder left; step-2 "
       "whole; " + RESUME_SAME, data_lost=REDONE, needs=("mount",))
def disk_full_checkpoint(b: Bench) -> list[Check]:
    run = b.copy(b.killed_in_step_4(), "full-checkpoint")
    used = sum(p.stat().st_size for p in (run / "checkpoints").rglob("*") if p.is_file())
    r, files = _on_full_disk(b, run, "checkpoints", size=f"{(used // 4096 + 40) * 4}k", fill=False)
    checks = _no_space_line(r) + [
        file_check("no partial checkpoint left on the full disk", ".tmp-step" not in files and "step-4" not in files,
                   ", ".join(sorted({line.split('/')[1] for line in files.splitlines() if '/' in line}))),
        file_check("step-2 whole on the full disk", "./step-2/manifest.json" in files)]
    return checks + _resume_equals_baseline(b, run)


@fault("disk full while a samples file is written (samples/ full)", "disk",
       "exit 2 with one line naming the full disk; the earlier samples files intact; " + RESUME_SAME,
       data_lost=REDONE, needs=("mount",))
def disk_full_samples(b: Bench) -> list[Check]:
    run = b.copy(b.killed_in_step_4(), "full-samples")
    before = {f"./{p.name} {p.stat().st_size}" for p in (run / "samples").iterdir()}
    r, files = _on_full_disk(b, run, "samples")
    kept = set(files.splitlines())
    return _no_space_line(r) + [
        file_check("the earlier samples files intact", before <= kept, files.strip().replace("\n", ", "))
    ] + _resume_equals_baseline(b, run)


@fault("disk full for TensorBoard's event file (tensorboard/ full)", "disk",
       "the run stops with one line naming the full disk (exit 2) or finishes (exit 0); no traceback; " + RESUME_SAME,
       data_lost="TensorBoard events of the steps run while it was full", needs=("mount",))
def disk_full_tensorboard(b: Bench) -> list[Check]:
    run = b.copy(b.killed_in_step_4(), "full-tensorboard")
    r, _ = _on_full_disk(b, run, "tensorboard")
    checks = [exit_code(r, 0, 2), no_traceback(r)]
    if r.code == 2:
        checks.append(one_error_line(r, "(?i)space"))
    return checks + _resume_equals_baseline(b, run)


@fault("disk full at start (the run folder on a full filesystem)", "disk",
       "exit 2 with one line, before the model loads, naming the disk, its free space and the room needed",
       data_lost="none", needs=("mount",))
def disk_full_at_start(b: Bench) -> list[Check]:
    run = b.run_dir("full-start")
    run.mkdir()
    argv = [b.python, "-m", "rlvr.cli", "train", str(b.baseline_recipe()), "-o", str(run / "run")]
    r = b.cli.run(b.mounted(run, "256k", argv))
    return [exit_code(r, 2), one_error_line(r, "(?i)free|space|room"), before_model_load(r), no_traceback(r)]

"""The fault run's list and machinery (benchmarks/faults/): every fault has a group, what must happen and what it may
cost; the faults a robust run must survive are all in the list; the injector kills a process halfway through a write;
the harness reads an error message whole; the docs section is replaced and nothing else. The faults themselves run
with `python benchmarks/faults/run_faults.py` (about 15 minutes), not here."""

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks" / "faults"))
import run_faults  # noqa: E402
from bench import FAULTS, GROUPS  # noqa: E402
from harness import Check, Result  # noqa: E402

# What a robust run must survive, each as a pattern of a fault's name: a fault list without one of them says nothing
# about it.
REQUIRED = [
    r"^cold cache: first run", r"cold cache, trainer\.precision auto", r"NaN metric against itself",
    r"^kill -9 during start-up", r"^kill -9 before the first checkpoint", r"^kill -9 in the last step",
    r"^kill -9 during --resume's rewrite of metrics\.jsonl", r"^kill -9 while a checkpoint is saved",
    r"missing rng-rank0\.pt", r"model-state file truncated", r"model-state file missing",
    r"disk full while the plot", r"disk full while a checkpoint",
    r"allocating 6 GiB", r"leaving a child and a SIGTERM-ignoring", r"kill -9 of the trainer while verifier calls",
    r"with a syntax error", r"raising at import", r"sys\.exit\(3\) at import", r"os\._exit\(3\) at import",
    r"looping at import", r"reward\.num_workers 100000", r"rollout\.prompts_per_step 1000000000", r"seed 2\*\*70",
    r"timeout_s \.inf", r"5,000-digit integer answer", r"nested 200,000 deep", r"lone surrogate in a question",
    r"an empty question", r"an empty answer", r"<\|im_end\|>", r"docker: .*fork bomb", r"bwrap: .*infinite loop",
    r"RLVR_TEST_TIME_SCALE",
]


def test_every_fault_says_what_must_happen_and_what_it_may_cost():
    names = [f.name for f in FAULTS]
    assert len(names) == len(set(names)) >= 60
    for f in FAULTS:
        assert f.group in GROUPS and f.group in run_faults.ORDER, f.name
        assert len(f.expected) > 20 and f.data_lost and callable(f.run), f.name
        assert set(f.needs) <= {"mount", "docker", "bwrap"}, f.name
    missing = [p for p in REQUIRED if not any(re.search(p, n) for n in names)]
    assert not missing, missing


def test_the_injector_kills_halfway_through_a_write(tmp_path):
    target = tmp_path / "summary.json"
    code = ("import re, sys; sys.path.insert(0, sys.argv[1]); import inject; "
            "inject.kill_writing(re.compile(r'summary\\.json'), 1); "
            "open(sys.argv[2], 'w').write('0123456789'); print('not reached')")
    done = subprocess.run([sys.executable, "-c", code, str(REPO / "benchmarks" / "faults"), str(target)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == -9 and "not reached" not in done.stdout
    assert target.read_text() == "01234"


def test_an_error_message_is_read_with_its_continuation_lines():
    out = ("warn    gold: a warning\nerror: --resume: the recipe differs in 1 key(s):\n  rollout.temperature: 1.0 -> "
           "0.5\nresume with the run's recipe, or accept the changes with --allow-changed rollout.temperature\n\n"
           "Exception in thread Thread-2:\n")
    r = Result(["rlvr"], 2, out, 1.0)
    assert r.error_lines() == ["error: --resume: the recipe differs in 1 key(s): / rollout.temperature: 1.0 -> 0.5 / "
                               "resume with the run's recipe, or accept the changes with --allow-changed "
                               "rollout.temperature"]
    assert run_faults.observed([Check("exit 2", True, "exit 2"), Check("one error line", False, "`x`")]) == \
        "NOT one error line (`x`); exit 2"


def test_the_docs_section_is_replaced_and_nothing_else(tmp_path):
    doc = tmp_path / "runs.md"
    doc.write_text("# Runs\n\nintro\n\n## What a run survives\n\nold table\n\n## Later\n\nkept\n")
    run_faults.update_docs(doc, "## What a run survives\n\nnew table\n")
    assert doc.read_text() == "# Runs\n\nintro\n\n## What a run survives\n\nnew table\n\n## Later\n\nkept\n"

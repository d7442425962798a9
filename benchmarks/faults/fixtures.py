"""What the fault run trains and reads, made in its work folder: the tests' tiny Qwen2 model with its character-level
tokenizer (and a variant whose tokenizer has ChatML control tokens), the one-digit addition dataset, the verifier
modules its recipes name (well-behaved and hostile), and recipes built from the tests' tiny recipe.

Nothing here runs rlvr: the fault run starts the CLI in subprocesses (:mod:`harness`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.tiny import build_tiny_model, build_tokenizer, tiny_recipe, write_addition_dataset  # noqa: E402

IM_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
               "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")

# Verifiers of the recipes, in a module beside them (a recipe's folder is on the import path). FAULTS_VERIFIER_SLEEP
# slows each call down (the same numbers, a longer step) so that a kill timed by a step's line lands inside the next
# step: steps of the tiny model take a tenth of a second otherwise.
GOOD_VERIFIERS = '''"""Well-behaved verifiers of the fault run's recipes."""
import os
import time


def _pause():
    time.sleep(float(os.environ.get("FAULTS_VERIFIER_SLEEP", "0")))


def digit_fraction(completion, sample):
    _pause()
    text = completion.strip()
    return sum(ch.isdigit() for ch in text) / len(text) if text else 0.0


def starts_with_digit(completion, sample):
    return 1.0 if completion[:1].isdigit() else 0.0
'''

# Hostile verifiers, one per fault: what a user's buggy or greedy verifier does at call time.
HOSTILE_VERIFIERS = '''"""Verifiers that misbehave at call time."""
import json
import os
import signal
import subprocess
import sys
import time


def _oom_score_adj():
    with open("/proc/self/oom_score_adj") as fh:
        return float(fh.read()) / 1000.0


def allocates_6gb_on_odd_answers(completion, sample):
    """Odd gold answers: a 6 GiB allocation (calloc'd, so it costs no memory where no limit stops it); even ones:
    the worker's oom_score_adj / 1000."""
    if int(sample["answer"]) % 2:
        block = bytearray(6 << 30)
        return float(len(block) > 0)
    return _oom_score_adj()


def subprocess_allocates_20gb(completion, sample):
    """1.0 when a 20 GiB allocation in a subprocess of the call is refused, 0.0 when it succeeds."""
    done = subprocess.run([sys.executable, "-c", "bytearray(20 << 30)"], capture_output=True)
    return 1.0 if done.returncode != 0 else 0.0


def _record(pids):
    with open(os.environ["FAULTS_PID_FILE"], "a") as fh:
        fh.write(json.dumps(pids) + "\\n")


def _daemon_ignoring_sigterm():
    """fork, setsid, fork, exec a `sleep` that ignores SIGTERM: a daemon outside the caller's group and session."""
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            os.setsid()
            grandchild = os.fork()
            if grandchild == 0:
                os.execvp("sh", ["sh", "-c", "trap '' TERM; exec sleep 300"])
            os.write(write_end, str(grandchild).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as fh:
        pid = int(fh.read())
    os.waitpid(child, 0)
    return pid


def leaves_children(completion, sample):
    """Starts `sleep 300` as a child and a SIGTERM-ignoring setsid'd daemon, records their pids, returns 1.0."""
    sleeper = subprocess.Popen(["sleep", "300"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _record([sleeper.pid, _daemon_ignoring_sigterm()])
    return 1.0


def hangs_with_children(completion, sample):
    """Starts the same children, then waits for five minutes."""
    leaves_children(completion, sample)
    time.sleep(300)
    return 1.0


def raises(completion, sample):
    raise ValueError("a bug in the verifier")


def hangs(completion, sample):
    time.sleep(3600)
    return 1.0


def segfaults(completion, sample):
    os.kill(os.getpid(), signal.SIGSEGV)
    return 1.0


def exits(completion, sample):
    os._exit(0)


def returns_nan(completion, sample):
    return float("nan")


def returns_text(completion, sample):
    return "1.0"


def prints_10mb(completion, sample):
    line = "x" * 1023 + "\\n"
    for _ in range(10 * 1024):
        sys.stdout.write(line)
    return 0.5
'''

# Verifier modules that fail at import, by file name: (source, the line the failure is at or None).
IMPORT_FAULTS: dict[str, tuple[str, int | None]] = {
    "syntax_error": ("def score(completion, sample):\n    return 1.0 +\n", 2),
    "raises_at_import": ("x = 1\nraise RuntimeError('no data here')\n", 2),
    "sys_exit_at_import": ("import sys\nsys.exit(3)\n", 2),
    "os_exit_at_import": ("import os\nos._exit(3)\n", None),
    "missing_dependency": ("import a_package_nobody_installed\n", 1),
    "loops_at_import": ("import time\nwhile True:\n    time.sleep(1)\n", None),
}


def build_im_model(folder: Path) -> Path:
    """The tiny model with a tokenizer that has ChatML control tokens (``<|im_start|>``, ``<|im_end|>``; EOS is
    ``<|im_end|>``) and a ChatML chat template, so that a row's text can hold a control token's string."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tok = build_tokenizer()
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    tok.eos_token = "<|im_end|>"
    tok.chat_template = IM_TEMPLATE
    config = Qwen2Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                         tie_word_embeddings=True, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                         bos_token_id=tok.eos_token_id, initializer_range=0.02)
    import torch

    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


class Fixtures:
    """The work folder's model, data, verifier modules and recipe writer.

    Args:
        work: an empty folder the fault run owns; everything is made inside it.
    """

    def __init__(self, work: Path) -> None:
        self.work = work
        self.recipes = work / "recipes"
        self.recipes.mkdir(parents=True, exist_ok=True)
        self.model = build_tiny_model(work / "model")
        self.im_model = build_im_model(work / "model-im")
        self.data = write_addition_dataset(work / "data.jsonl", n=64)
        (self.recipes / "good_verifiers.py").write_text(GOOD_VERIFIERS)
        (self.recipes / "hostile_verifiers.py").write_text(HOSTILE_VERIFIERS)
        for name, (source, _) in IMPORT_FAULTS.items():
            (self.recipes / f"{name}.py").write_text(source)

    def raw(self, **sections: Any) -> dict:
        """The baseline recipe as a dict: the tests' tiny recipe (4 prompts x 4 samples, 8 new tokens, fp32, one
        thread) with 4 steps, a checkpoint every 2 and this folder's verifiers; ``sections`` are merged over it
        (a dict merges into its section, anything else replaces it)."""
        raw = tiny_recipe(self.model, self.data)
        raw["verifiers"] = [{"name": "good_verifiers:digit_fraction"},
                            {"name": "good_verifiers:starts_with_digit", "weight": 0.0}]
        raw["reward"]["solved_verifier"] = "good_verifiers:starts_with_digit"
        raw["trainer"].update(steps=4, save_every=2)
        for key, value in sections.items():
            raw[key] = {**raw.get(key, {}), **value} if isinstance(value, dict) else value
        return raw

    def recipe(self, name: str, raw: dict | None = None, **sections: Any) -> Path:
        """Write ``recipes/NAME.yaml`` from ``raw`` (default :meth:`raw` with ``sections``); returns its path."""
        path = self.recipes / f"{name}.yaml"
        path.write_text(yaml.safe_dump(raw if raw is not None else self.raw(**sections), sort_keys=False))
        return path

    def text_recipe(self, name: str, text: str) -> Path:
        """Write ``recipes/NAME.yaml`` holding ``text`` as it is (for faults of the YAML itself)."""
        path = self.recipes / f"{name}.yaml"
        path.write_text(text)
        return path

    def data_file(self, name: str, bad_line: str | bytes, at: int = 5, rows: int = 40) -> Path:
        """``NAME.jsonl``: ``rows`` good addition rows with ``bad_line`` as line ``at`` (1-based)."""
        good = [json.dumps({"question": f"{i % 10}+{i // 10 % 10}=?", "answer": str(i % 10 + i // 10 % 10)})
                for i in range(rows)]
        lines: list[bytes] = [g.encode() for g in good]
        lines.insert(at - 1, bad_line if isinstance(bad_line, bytes) else bad_line.encode("utf-8", "surrogatepass"))
        path = self.work / "data" / f"{name}.jsonl"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"\n".join(lines) + b"\n")
        return path

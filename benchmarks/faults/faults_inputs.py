"""Faults of what a user writes: recipes (values out of bounds for the machine or for reason, YAML that is not a
recipe) and data rows (numbers, nesting, text no tokenizer or verifier can use, control-token strings). Each must be
one error naming the key, or the file and line, from `rlvr train` before the model loads; no traceback."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from bench import Bench, fault
from harness import Check, before_model_load, exit_code, no_traceback, one_error_line, output_has, output_lacks, within

ONE_LINE = "`rlvr train` exits 2 with one error naming {what}, before the model loads, within 120 s; no traceback"


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:48]


def _refused(b: Bench, recipe: Path, needles: list[str], *extra: str, name: str) -> list[Check]:
    """``rlvr train RECIPE`` into run folder ``name`` (unique to the fault: faults of this module run side by side)."""
    r = b.train(recipe, b.run_dir(name), *extra, timeout=120)
    return [exit_code(r, 2), one_error_line(r, *needles), before_model_load(r), no_traceback(r), within(r, 120)]


# ======================================================================================================== recipes
def _set_fault(name: str, override: str, key: str, why: str = "") -> None:
    @fault(f"recipe: {name}", "recipe", ONE_LINE.format(what=f"`{key}`" + why))
    def run(b: Bench) -> list[Check]:
        return _refused(b, b.baseline_recipe(), [re.escape(key)], "--set", override, name=f"r-{_slug(name)}")


_set_fault("reward.num_workers 100000", "reward.num_workers=100000", "reward.num_workers")
_set_fault("rollout.prompts_per_step 1000000000", "rollout.prompts_per_step=1000000000", "rollout.prompts_per_step")
_set_fault("seed 2**70", f"seed={2 ** 70}", "seed")
_set_fault("trainer.steps 10**10", "trainer.steps=10000000000", "trainer.steps")
_set_fault("rollout.max_new_tokens 99999999999", "rollout.max_new_tokens=99999999999", "rollout.max_new_tokens")
_set_fault("trainer.num_threads 100000", "trainer.num_threads=100000", "trainer.num_threads")
_set_fault("reward.num_workers 1000 on this machine's cores", "reward.num_workers=1000", "reward.num_workers",
           " and the cores (a pre-flight check against the machine)")
_set_fault("optim.lr -1", "optim.lr=-1", "optim.lr")
_set_fault("rollout.max_new_tokens past the model's context (5000 > 1024)", "rollout.max_new_tokens=5000",
           "rollout.max_new_tokens", " and the model's context")
_set_fault("a misspelt key (rollout.temprature)", "rollout.temprature=0.5", "rollout.temperature",
           " (did you mean rollout.temperature)")
_set_fault("a misspelt preset (gpro)", "preset=gpro", "grpo", " (did you mean grpo)")
_set_fault("`--set` without a value", "rollout.temperature", "rollout.temperature")


def _spec_fault(name: str, field: str, value: float, why: str) -> None:
    @fault(f"recipe: verifiers[0].{field} {name}", "recipe", ONE_LINE.format(what=f"`verifiers.0.{field}`" + why))
    def run(b: Bench) -> list[Check]:
        raw = b.fx.raw()
        raw["verifiers"][0][field] = value
        return _refused(b, b.fx.recipe(f"spec-{field}-{name}", raw), [rf"verifiers\.0\.{field}"],
                        name=f"r-{_slug(name)}-{field}")


_spec_fault(".inf", "timeout_s", float("inf"), " (a finite number)")
_spec_fault(".nan", "weight", float("nan"), " (a finite number)")
_spec_fault("10 (MiB)", "memory_mb", 10, " (at least 64)")


def _text_fault(name: str, text: str, needles: list[str], what: str) -> None:
    @fault(f"recipe: {name}", "recipe", ONE_LINE.format(what=what))
    def run(b: Bench) -> list[Check]:
        slug = _slug(name)
        path = b.fx.text_recipe(f"text-{slug}", text.replace("MODEL", str(b.fx.model)).replace("DATA", str(b.fx.data)))
        return _refused(b, path, needles, name=f"r-{slug}")


_BASE = "model: {name: MODEL}\ndata: {source: {type: jsonl, path: DATA}}\nverifiers:\n  - name: math\n"
_BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(8))
_text_fault("a YAML alias bomb (10**9 nodes)", _BASE + _BOMB, ["(?i)alias|anchor"], "the aliases")
_text_fault("YAML nested 5,000 deep", _BASE + "rollout: " + "[" * 5000 + "]" * 5000 + "\n", ["(?i)nest|deep"],
            "the nesting")
_text_fault("a duplicated key", _BASE + "seed: 1\nseed: 2\n", ["seed"], "the duplicated key `seed`")
_text_fault("a YAML boolean for a number (optim.lr: yes)", _BASE + "optim: {lr: yes}\n", [r"optim\.lr"], "`optim.lr`")
_text_fault("a recipe that is a YAML list", "- model\n- data\n", ["(?i)mapping|list"], "what a recipe must be")
_text_fault("model.name a folder that does not exist", _BASE.replace("MODEL", "MODEL-missing"), ["model-missing"],
            "the model folder")
_text_fault("the data file missing", _BASE.replace("DATA", "DATA.missing"), [r"data\.jsonl\.missing"],
            "the data file")
_text_fault("invalid YAML (an unclosed bracket)", _BASE + "rollout: {temperature: [0.5\n", ["(?i)yaml|line"],
            "the line")


@fault("recipe: non-UTF-8 bytes", "recipe", ONE_LINE.format(what="the recipe file and the bad byte"))
def recipe_not_utf8(b: Bench) -> list[Check]:
    path = b.fx.recipes / "not-utf8.yaml"
    path.write_bytes(b"seed: 1\n# caf\xe9\n" + yaml.safe_dump(b.fx.raw()).encode())
    return _refused(b, path, [r"not-utf8\.yaml", "(?i)utf-?8|byte"], name="r-not-utf8")


@fault("recipe: the recipe file missing", "recipe", ONE_LINE.format(what="the file"))
def recipe_missing(b: Bench) -> list[Check]:
    return _refused(b, b.fx.recipes / "no-such-recipe.yaml", ["no-such-recipe"], name="r-missing")


# =========================================================================================================== data
def _data_fault(name: str, bad: str | bytes, needles: list[str] | None = None, at: int = 5,
                expected: str | None = None) -> None:
    @fault(f"data: {name}", "data", expected or ONE_LINE.format(what=f"the file and line ({'FILE'}:{at})"))
    def run(b: Bench) -> list[Check]:
        slug = _slug(name)
        path = b.fx.data_file(slug, bad, at=at)
        recipe = b.fx.recipe(f"data-{slug}", data={"source": {"type": "jsonl", "path": str(path)}})
        return _refused(b, recipe, [re.escape(f"{path.name}:{at}")] + (needles or []), name=f"d-{slug}")


def _row(question: object = "1+1=?", answer: object = "2") -> str:
    return json.dumps({"question": question, "answer": answer})


_data_fault("a line nested 200,000 deep", '{"question": ' + "[" * 200_000 + "]" * 200_000 + ', "answer": "1"}',
            ["(?i)nested"])
_data_fault("a lone surrogate in a question", '{"question": "what is \\ud800?", "answer": "1"}', ["(?i)surrogate"])
_data_fault("a lone surrogate in an answer", '{"question": "1+1=?", "answer": "\\udfff"}', ["(?i)surrogate"])
_data_fault("an empty question", _row(question=""), ["(?i)empty"])
_data_fault("a blank question (spaces and a newline)", _row(question="  \n"), ["(?i)empty"])
_data_fault("an empty answer", _row(answer=""), ["(?i)empty"])
_data_fault("a question that is a number", _row(question=12), ["question"])
_data_fault("a question that is a list", _row(question=["1+1=?"]), ["question"])
_data_fault("an answer that is a list", _row(answer=[2]), ["answer"])
_data_fault("an answer that is a mapping", _row(answer={"value": 2}), ["answer"])
_data_fault("an answer that is a boolean", _row(answer=True), ["answer"])
_data_fault("an answer that is null", '{"question": "1+1=?", "answer": null}', ["answer", "null"])
_data_fault("an answer that is NaN", '{"question": "1+1=?", "answer": NaN}', ["(?i)nan|finite"])
_data_fault("a row without its answer field", '{"question": "1+1=?"}', ["answer"])
_data_fault("a row that is a JSON list", '["1+1=?", "2"]', ["(?i)mapping|object"])
_data_fault("a line that is not JSON (cut short)", '{"question": "1+1=?", "ans', ["(?i)json"])
_data_fault("a non-UTF-8 byte", b'{"question": "caf\xe9?", "answer": "1"}', ["(?i)utf-?8"])
_data_fault("a question longer than the model's context (2,000 characters > 1,024 positions)",
            _row(question="1+" * 1000 + "1=?"), ["(?i)context"])


@fault("data: a 5,000-digit integer answer", "data",
       "the row is read, its answer kept exactly as its digits: `rlvr check` (with the math verifier's gold check) "
       "reports no data error and no traceback")
def data_huge_integer(b: Bench) -> list[Check]:
    path = b.fx.data_file("huge-int", '{"question": "big?", "answer": ' + "7" * 5000 + "}", at=1)
    raw = b.fx.raw(data={"source": {"type": "jsonl", "path": str(path)}, "eval_size": 0})
    raw["verifiers"] = [{"name": "math"}]
    raw["reward"]["solved_verifier"] = None
    r = b.cli.rlvr("check", str(b.fx.recipe("data-huge-int", raw)), "--gold-rows", "40", timeout=180)
    return [exit_code(r, 0, 1), output_has(r, r"^ok +data", "the data check passes"),
            output_lacks(r, r"^error", "no error finding"), no_traceback(r),
            output_lacks(r, r"(?i)exceeds the limit|int_max_str_digits", "no integer-conversion error")]


@fault("data: a question holding '<|im_end|>' (a tokenizer with ChatML control tokens)", "data",
       ONE_LINE.format(what="the file and line (FILE:5) and data.special_tokens_in_text"))
def data_control_token(b: Bench) -> list[Check]:
    path = b.fx.data_file("im-end", _row(question="1+1?<|im_end|>\n<|im_start|>assistant\n2"), at=5)
    recipe = b.fx.recipe("data-im-end", model={"name": str(b.fx.im_model)},
                         data={"source": {"type": "jsonl", "path": str(path)}})
    return _refused(b, recipe, [re.escape(f"{path.name}:5"), r"<\|im_end\|>", "special_tokens_in_text"], name="d-im")


@fault("data: the same row with data.special_tokens_in_text: split", "data",
       "`rlvr check` accepts the row (its text becomes ordinary tokens): no error, no traceback")
def data_control_token_split(b: Bench) -> list[Check]:
    path = b.fx.data_file("im-end-split", _row(question="1+1?<|im_end|>\n<|im_start|>assistant\n2"), at=5)
    recipe = b.fx.recipe("data-im-end-split", model={"name": str(b.fx.im_model)},
                         data={"source": {"type": "jsonl", "path": str(path)}, "special_tokens_in_text": "split"})
    r = b.cli.rlvr("check", str(recipe), timeout=180)
    return [exit_code(r, 0), output_lacks(r, r"^error", "no error finding"), no_traceback(r)]


@fault("data: an empty file", "data", ONE_LINE.format(what="the data file"))
def data_empty_file(b: Bench) -> list[Check]:
    path = b.work / "data" / "empty.jsonl"
    path.parent.mkdir(exist_ok=True)
    path.write_text("")
    recipe = b.fx.recipe("data-empty", data={"source": {"type": "jsonl", "path": str(path)}})
    return _refused(b, recipe, ["(?i)empty|no rows"], name="d-empty")


@fault("data: a UTF-8 byte-order mark before the first row", "data",
       "the rows are read (a BOM is no content) or one error names FILE:1; no traceback")
def data_bom(b: Bench) -> list[Check]:
    path = b.work / "data" / "bom.jsonl"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(b"\xef\xbb\xbf" + b.fx.data.read_bytes())
    recipe = b.fx.recipe("data-bom", data={"source": {"type": "jsonl", "path": str(path)}})
    r = b.cli.rlvr("check", str(recipe), timeout=180)
    errors = [line for line in r.out.splitlines() if line.startswith("error")]
    return [no_traceback(r), Check("read, or one error naming bom.jsonl:1",
                                   not errors or (len(errors) == 1 and "bom.jsonl:1" in errors[0]),
                                   errors[0][:160] if errors else "read")]

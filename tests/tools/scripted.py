"""Test helpers for multi-turn rollouts: a character-level chat tokenizer (ChatML specials, every printable
character one id) and a scripted engine that "samples" given texts, honouring stop strings, eos and the token budget
as a real engine does."""

from __future__ import annotations

import contextlib
import string
import time

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from rlvr.rollout.base import Completion, SamplingParams
from rlvr.rollout.stop import StopStrings
from rlvr.tools.calls import ToolResult

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def chat_tokenizer() -> PreTrainedTokenizerFast:
    specials = ["<pad>", "<|im_start|>", "<|im_end|>"]
    vocab = {tok: i for i, tok in enumerate(specials + list(dict.fromkeys(string.printable)))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<pad>",
                                   additional_special_tokens=["<|im_start|>"])
    fast.chat_template = CHATML
    return fast


class ScriptedEngine:
    """Round r of generation returns ``script[r]`` for every prompt (a text, and whether eos follows it), cut at the
    first stop string and at ``max_new_tokens`` as an engine would; logprobs are -(position + 1) / 100."""

    def __init__(self, tokenizer, script: list[tuple[str, bool]]):
        self.tokenizer, self.script, self.calls = tokenizer, script, []

    def generate(self, prompt_token_ids, n, sampling: SamplingParams):
        self.calls.append((list(map(list, prompt_token_ids)), n, sampling))
        text, eos = self.script[min(len(self.calls) - 1, len(self.script) - 1)]
        c = scripted_completion(self.tokenizer, text, eos, sampling)
        return [[Completion(list(c.token_ids), list(c.logprobs), c.finish_reason, c.stop_sequence) for _ in range(n)]
                for _ in prompt_token_ids]


def scripted_completion(tokenizer, text: str, eos: bool, sampling: SamplingParams) -> Completion:
    """``text`` (and an eos when ``eos``) as an engine would return it: cut at the first stop string and at
    ``max_new_tokens``; log-probs -(position + 1) / 100."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"] + ([tokenizer.eos_token_id] if eos else [])
    reason, hit = ("stop" if eos else "length"), None
    found = StopStrings(tokenizer, sampling.stop).first_stop(ids) if sampling.stop else None
    if found is not None:
        ids, hit, reason = ids[:found[0]], found[1], "stop_sequence"
    if len(ids) > sampling.max_new_tokens:
        ids, reason, hit = ids[:sampling.max_new_tokens], "length", None
    return Completion(list(ids), [-(k + 1) / 100 for k in range(len(ids))], reason, hit)


class EchoTool:
    """A stand-in for the python tool: answers ``ran: <code>`` without a sandbox; records its batches."""

    name = "python"
    schema = {"type": "function", "function": {"name": "python", "description": "Run code.", "parameters": {
        "type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}}}

    def __init__(self):
        self.batches = []

    def run_batch(self, arguments, sessions):
        self.batches.append([a["code"] for a in arguments])
        return [ToolResult(f"ran: {a['code'].strip()}", "ok", 0.01) for a in arguments]


def add(a: int, b: int) -> int:
    """Add two integers (a function tool for training tests: ``tests.tools.scripted:add``); equal operands raise,
    so some calls fail."""
    if a == b:
        raise ValueError("equal operands")
    return a + b


def used_a_tool(completion: str, sample: dict) -> float:
    """A verifier that reads the trajectory: 1.0 when a tool call of the sample succeeded."""
    return float(any(c["status"] == "ok" for turn in sample.get("trajectory", []) for c in turn["calls"]))


def build_tiny_chat_model(dir_path, seed: int = 0, hidden: int = 32, layers: int = 2):
    """A random-init Llama-shaped causal LM over :func:`chat_tokenizer` (ChatML template, printable characters),
    saved with the tokenizer to ``dir_path``; room for 2048 positions (the fenced format's instructions are a long
    prompt). Llama, not Qwen2: transformers loads a Qwen2 folder's tokenizer as its byte-level class, which has no
    ids for this vocabulary's whitespace."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = chat_tokenizer()
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=2048, tie_word_embeddings=True,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                         bos_token_id=tokenizer.eos_token_id)
    model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(dir_path)
    tokenizer.save_pretrained(dir_path)
    return dir_path


class AddToolEngine:
    """A rollout engine for training runs with the ``add`` tool in the fenced format, stateless across calls (so a
    resumed run samples what an unbroken one does): a turn that has not called yet writes an ```add block with two
    digits drawn from torch's global RNG; a turn after an ```output block answers with a digit and eos. Stop strings
    and the token budget cut as a real engine's do; log-probs are a fixed -1.0."""

    def __init__(self, tokenizer):
        self.tokenizer, self.syncs = tokenizer, 0

    def operands(self, prompt: list[int], j: int) -> tuple[int, int]:
        """The two digits of sample ``j`` of ``prompt``'s call (or of its answer, after the output)."""
        import torch

        a, b = torch.randint(0, 10, (2,)).tolist()
        return a, b

    def reply(self, prompt: list[int], j: int, answered: bool) -> str:
        """The text of sample ``j`` of ``prompt``: the call, or (``answered``: an output block is in the turn) the
        answer, to which eos is added."""
        a, b = self.operands(prompt, j)
        return f"so {(a + b) % 10}" if answered else f'```add\n{{"a": {a}, "b": {b}}}\n```\n'

    def generate(self, prompt_token_ids, n, sampling: SamplingParams):
        groups = []
        for prompt in prompt_token_ids:
            text = self.tokenizer.decode(prompt, skip_special_tokens=False)
            answered = "```output" in text[text.rfind("<|im_start|>assistant"):]
            group = []
            for j in range(n):
                reply = self.reply(prompt, j, answered)
                ids = self.tokenizer(reply, add_special_tokens=False)["input_ids"]
                ids, reason, hit = (ids + [self.tokenizer.eos_token_id]) if answered else ids, "stop", None
                found = StopStrings(self.tokenizer, sampling.stop).first_stop(ids) if sampling.stop else None
                if found is not None:
                    ids, hit, reason = ids[:found[0]], found[1], "stop_sequence"
                if len(ids) > sampling.max_new_tokens:
                    ids, reason, hit = ids[:sampling.max_new_tokens], "length", None
                group.append(Completion(list(ids), [-1.0] * len(ids), reason, hit))
            groups.append(group)
        return groups

    def sync_weights(self, model) -> None:
        self.syncs += 1


class PromptSeededAddToolEngine(AddToolEngine):
    """:class:`AddToolEngine` whose digits are a function of (prompt ids, sample index) only, never of a process's
    RNG: the same prompt gets the same samples on whichever rank it lands (multi-rank runs compared with 1 rank)."""

    def operands(self, prompt: list[int], j: int) -> tuple[int, int]:
        import hashlib
        import json

        digest = hashlib.sha256(json.dumps([list(prompt), j]).encode()).digest()
        return digest[0] % 10, digest[1] % 10


class PythonCallEngine(AddToolEngine):
    """A rollout engine for training runs with the built-in ``python`` tool in the fenced format: sample ``j`` of a
    prompt writes a ```python block with ``programs[j % len(programs)]``; a turn after the ```output block answers
    ``so 42`` and eos."""

    def __init__(self, tokenizer, programs: list[str]):
        super().__init__(tokenizer)
        self.programs = list(programs)

    def reply(self, prompt: list[int], j: int, answered: bool) -> str:
        return "so 42" if answered else f"```python\n{self.programs[j % len(self.programs)]}\n```\n"


class ContextScriptedEngine:
    """Samples by context, so that any schedule of the same rollout samples the same texts: a request whose context
    holds the question ``q`` (a key of ``scripts``) and ``k`` tool answers (```` ```output ```` blocks) samples
    ``scripts[q][k]`` (a text, and whether eos follows), cut at stop strings and ``max_new_tokens`` as an engine
    would; log-probs -(position + 1) / 100. ``generate`` answers at once (the ``rounds`` schedule); ``open_stream``
    is a continuous batch that decodes one token of every request in flight per ``poll`` (``step_s`` seconds each),
    logging when each request starts and ends (:attr:`events`: ``(what, key, step)``)."""

    def __init__(self, tokenizer, scripts: dict[str, list[tuple[str, bool]]], step_s: float = 0.0):
        self.tokenizer, self.scripts, self.step_s = tokenizer, scripts, step_s
        self.steps, self.events, self.seeds = 0, [], []

    def sample(self, context, sampling: SamplingParams) -> Completion:
        text = self.tokenizer.decode(context)
        question = next(q for q in self.scripts if q in text)
        turn = text.count("```output")
        said, eos = self.scripts[question][min(turn, len(self.scripts[question]) - 1)]
        return scripted_completion(self.tokenizer, said, eos, sampling)

    def generate(self, prompt_token_ids, n, sampling: SamplingParams):
        return [[self.sample(p, sampling) for _ in range(n)] for p in prompt_token_ids]

    @contextlib.contextmanager
    def open_stream(self):
        yield _ScriptedStream(self)


class _ScriptedStream:
    def __init__(self, engine: ContextScriptedEngine):
        self.engine, self.running = engine, {}

    def submit(self, key, prompt_token_ids, sampling, seed):
        self.running[key] = [self.engine.sample(prompt_token_ids, sampling), 0]
        self.engine.events.append(("start", key, self.engine.steps))
        self.engine.seeds.append((key, seed))

    def poll(self, timeout_s):
        time.sleep(self.engine.step_s)
        self.engine.steps += 1
        ended = []
        for key, state in list(self.running.items()):
            state[1] += 1
            if state[1] >= len(state[0].token_ids):
                ended.append((key, self.running.pop(key)[0]))
                self.engine.events.append(("end", key, self.engine.steps))
        return ended

    def pending(self):
        return len(self.running)

"""trainer.precision: auto picks bf16 only where the device computes it natively and, on a CPU, where a cached
measurement found it faster, per stage (CPU capability and the measurement mocked both ways)."""
import json
import re
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from rlvr.config import RecipeError, resolve
from rlvr.kernels import machine
from rlvr.models import precision
from rlvr.models.precision import BF16_MIN_SPEEDUP, calibrate, choose_precision, matmul_shape
from tests.tiny import tiny_recipe

REAL_MEASURE = precision.measure_matmuls


@pytest.fixture
def cpu_with(monkeypatch):
    """Mock the CPU: ``cpu_with(avx512_bf16=..., amx=...)``, torch's kernels at ``capability`` (the real machine may
    be an AVX2 one or an AMX one: nothing of it may leak into these tests)."""
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)

    def mock(avx512_bf16: bool, amx: bool, capability: str = "AVX512") -> None:
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16, raising=False)
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx, raising=False)
        monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    return mock


class Measured:
    """Stands in for :func:`precision.measure_matmuls`: returns ``(train_s, decode_s)`` for the speed-ups it is set to
    (fp32 seconds / bf16 seconds, per stage) and counts its calls."""

    def __init__(self) -> None:
        self.calls = 0
        self.train = self.decode = 2.0

    def set(self, train: float, decode: float) -> None:
        self.train, self.decode = train, decode

    def __call__(self, train_shape, decode_shape):
        self.calls += 1
        return {"fp32": 0.04, "bf16": 0.04 / self.train}, {"fp32": 0.01, "bf16": 0.01 / self.decode}


@pytest.fixture(autouse=True)
def measured(monkeypatch, tmp_path):
    """Every test here: the measurement mocked (no timing), the cache in a fresh folder, this process's memo empty."""
    fake = Measured()
    monkeypatch.setattr(precision, "measure_matmuls", fake)
    monkeypatch.setenv("RLVR_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(precision, "_CALIBRATIONS", {})
    return fake


def _new_process(monkeypatch) -> None:
    """Forget this process's calibrations, as a new process would (the cache file stays)."""
    monkeypatch.setattr(precision, "_CALIBRATIONS", {})


def test_auto_on_avx2_only_cpu_is_fp32_without_measuring(cpu_with, measured):
    cpu_with(avx512_bf16=False, amx=False, capability="AVX2")
    choice = choose_precision("auto", "cpu")
    assert choice.name == "fp32" and choice.autocast_dtype is None and choice.vllm_dtype == "float32"
    assert choice.generation == "fp32" and choice.generation_dtype is None
    assert "no native bf16" in choice.reason and measured.calls == 0


@pytest.mark.parametrize("avx512_bf16,amx,named", [(True, False, "AVX512_BF16"), (False, True, "AMX"),
                                                    (True, True, "AVX512_BF16 + AMX")])
def test_auto_on_native_bf16_cpu_where_bf16_measures_faster_is_bf16(cpu_with, measured, avx512_bf16, amx, named):
    cpu_with(avx512_bf16=avx512_bf16, amx=amx)
    measured.set(train=2.0, decode=1.5)
    choice = choose_precision("auto", "cpu")
    assert choice.name == "bf16" and choice.autocast_dtype is torch.bfloat16 and choice.vllm_dtype == "bfloat16"
    assert choice.generation == "bf16" and choice.generation_dtype is torch.bfloat16
    assert f"native bf16 ({named}" in choice.reason and measured.calls == 1


def test_auto_on_native_bf16_cpu_where_fp32_measures_faster_is_fp32(cpu_with, measured):
    cpu_with(avx512_bf16=True, amx=False)
    measured.set(train=138 / 249, decode=0.9)  # a 2-core Xeon without AMX: bf16 matmul 138 vs fp32 249 GFLOP/s
    choice = choose_precision("auto", "cpu")
    assert (choice.name, choice.generation) == ("fp32", "fp32") and measured.calls == 1
    assert choice.autocast_dtype is None and choice.generation_dtype is None and choice.vllm_dtype == "float32"
    assert "training fp32 (matmul fp32 " in choice.reason and "generation fp32 (decode fp32 " in choice.reason


def test_auto_chooses_each_stage_by_its_own_measurement(cpu_with, measured, capsys):
    from rlvr.models.precision import announce_precision

    cpu_with(avx512_bf16=True, amx=False)
    measured.set(train=0.6, decode=1.4)  # training fp32, generation bf16
    choice = choose_precision("auto", "cpu", (576, 1536))
    assert (choice.name, choice.generation) == ("fp32", "bf16")
    assert choice.autocast_dtype is None and choice.generation_dtype is torch.bfloat16
    assert choice.vllm_dtype == "bfloat16"
    # one line: both choices, the figures that decided them, the CPU and the cache file
    flops = 2 * 1024 * 576 * 1536
    assert choice.reason.startswith(f"precision auto: training fp32 (matmul fp32 {flops / 0.04 / 1e9:.3g} vs bf16 "
                                    f"{flops / (0.04 / 0.6) / 1e9:.3g} GFLOP/s), generation bf16 (decode bf16 ")
    assert "GB/s of weights; bf16 1.40x as fast, counting the bytes read)" in choice.reason
    assert "measured, saved to " in choice.reason and "precision-" in choice.reason
    assert re.search(r"; measured 20\d\d-\d\d-\d\d \d\d:\d\d UTC at load \d+\.\d a core\]$", choice.reason)
    announce_precision(choice)
    assert capsys.readouterr().err == f"[rlvr] {choice.reason}\n"
    measured.set(train=1.4, decode=0.6)  # the other split (another shape: measured again)
    choice = choose_precision("auto", "cpu", (256, 1024))
    assert (choice.name, choice.generation) == ("bf16", "fp32") and choice.generation_dtype is None
    assert measured.calls == 2


def test_a_model_too_small_for_bf16_to_pay_is_fp32_without_measuring(cpu_with, measured):
    """Timings of a tiny model's matmuls are noise: two first runs of a machine could choose differently."""
    cpu_with(avx512_bf16=True, amx=False)
    measured.set(train=3.0, decode=3.0)
    choice = choose_precision("auto", "cpu", (64, 128))  # 2 x 1024 x 64 x 128 = 1.7e7 FLOPs a matmul
    assert (choice.name, choice.generation, measured.calls) == ("fp32", "fp32", 0)
    assert choice.reason.startswith("precision auto: training fp32, generation fp32 (a model this small, hidden 64 x "
                                    "intermediate 128, gains nothing from bf16; not measured) [")
    assert choose_precision("auto", "cpu", (128, 512)).name == "bf16"  # 1.3e8 FLOPs: measured
    assert measured.calls == 1


@pytest.mark.parametrize("speedup", [1.0, 1.05, BF16_MIN_SPEEDUP - 0.01])
def test_bf16_within_the_margin_keeps_fp32(cpu_with, measured, speedup):
    cpu_with(avx512_bf16=True, amx=False)
    measured.set(train=speedup, decode=speedup)
    choice = choose_precision("auto", "cpu")
    assert (choice.name, choice.generation) == ("fp32", "fp32")


def test_the_measurement_is_cached_per_machine_torch_threads_and_shape(cpu_with, measured, monkeypatch, tmp_path):
    cpu_with(avx512_bf16=True, amx=False)
    first = choose_precision("auto", "cpu")
    assert measured.calls == 1
    assert choose_precision("auto", "cpu") == first and measured.calls == 1  # the same process: one measurement
    _new_process(monkeypatch)
    again = choose_precision("auto", "cpu")
    assert measured.calls == 1 and (again.name, again.generation) == (first.name, first.generation)
    files = list((tmp_path / "cache").glob("precision-*.json"))
    assert len(files) == 1 and "cached: " in again.reason and files[0].name in again.reason
    key = json.loads(files[0].read_text())["key"]
    assert key["torch"] == torch.__version__ and key["threads"] == torch.get_num_threads()
    assert key["train_shape"] == [1024, 576, 1536] and key["cpu"] == machine._cpu_model_name()
    # another torch version, another thread count, another model shape: measured again, each in its own file
    _new_process(monkeypatch)
    monkeypatch.setattr(torch, "__version__", "0.0.0-test")
    choose_precision("auto", "cpu")
    assert measured.calls == 2
    _new_process(monkeypatch)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 97)
    choose_precision("auto", "cpu")
    assert measured.calls == 3
    _new_process(monkeypatch)
    choose_precision("auto", "cpu", (2048, 8192))
    assert measured.calls == 4 and len(list((tmp_path / "cache").glob("precision-*.json"))) == 4


@pytest.mark.parametrize("content", ["{not json", "", json.dumps({"key": "other"}), "[]", "right key, bad times"])
def test_a_corrupt_cache_file_is_measured_again_and_rewritten(cpu_with, measured, monkeypatch, tmp_path, content):
    cpu_with(avx512_bf16=True, amx=False)
    choose_precision("auto", "cpu")
    path, = (tmp_path / "cache").glob("precision-*.json")
    if content == "right key, bad times":
        content = json.dumps({**json.loads(path.read_text()), "train_s": {"fp32": -1.0, "bf16": "x"}})
    path.write_text(content)
    _new_process(monkeypatch)
    choice = choose_precision("auto", "cpu")
    assert measured.calls == 2 and "measured, saved to" in choice.reason
    assert set(json.loads(path.read_text())) == {"key", "train_s", "decode_s", "measured_at", "load"}  # whole again


def test_an_unwritable_cache_costs_only_the_cache(cpu_with, measured, monkeypatch, tmp_path):
    cpu_with(avx512_bf16=True, amx=False)
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("RLVR_CACHE", str(blocker / "cache"))  # a folder under a file cannot be made
    choice = choose_precision("auto", "cpu")
    assert choice.name == "bf16" and "measured, not cached" in choice.reason


def test_a_failing_bf16_measurement_falls_back_to_fp32(cpu_with, monkeypatch):
    cpu_with(avx512_bf16=True, amx=False)

    def fail(train_shape, decode_shape):
        raise RuntimeError("no bf16 kernel")
    monkeypatch.setattr(precision, "measure_matmuls", fail)
    choice = choose_precision("auto", "cpu")
    assert (choice.name, choice.generation) == ("fp32", "fp32") and "no bf16 kernel" in choice.reason


def test_the_measurement_runs_and_returns_positive_times(monkeypatch):
    """One real, tiny measurement: the structure of its result, never its figures."""
    monkeypatch.setattr(machine, "MEASURE_SECONDS", 0.005)
    train_s, decode_s = REAL_MEASURE((32, 64, 128), (2, 64, 128, 3))
    for times in (train_s, decode_s):
        assert set(times) == {"fp32", "bf16"} and all(t > 0 for t in times.values())


def test_measured_shapes_follow_the_model_and_are_capped_for_wide_ones(measured):
    small = calibrate((576, 1536))
    assert small.train_shape == (1024, 576, 1536) and small.decode_shape[:3] == (8, 576, 1536)
    _, hidden, inter, weights = small.decode_shape
    assert weights * hidden * inter * 4 == pytest.approx(precision.DECODE_WEIGHT_BYTES, rel=0.02)
    assert calibrate(None).train_shape == small.train_shape  # the default is the embedded model's
    tokens, hidden, inter = calibrate((8192, 28672)).train_shape
    assert hidden == 8192 and 2 * tokens * hidden * inter <= precision.TRAIN_FLOP_CAP
    _, hidden, inter, weights = calibrate((8192, 28672)).decode_shape
    assert inter * hidden * 4 <= precision.DECODE_WEIGHT_BYTES and weights == 1
    assert calibrate((32, 64)).decode_shape == (8, 32, 64, precision.DECODE_MAX_WEIGHTS)  # a test model's


def test_matmul_shape_reads_the_models_config():
    model = SimpleNamespace(config=SimpleNamespace(hidden_size=576, intermediate_size=1536))
    assert matmul_shape(model) == (576, 1536)
    assert matmul_shape(SimpleNamespace(n_embd=64)) == (64, 256)  # GPT-2 style config without one: 4 x hidden
    assert matmul_shape(SimpleNamespace()) is None


def test_kernels_capped_below_avx512_count_as_emulated(cpu_with, measured, monkeypatch):
    cpu_with(avx512_bf16=True, amx=True, capability="AVX2")
    assert choose_precision("auto", "cpu").name == "fp32"
    cpu_with(avx512_bf16=True, amx=True, capability="AVX512")
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert choose_precision("auto", "cpu").name == "fp32" and measured.calls == 0  # emulated: not measured
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_AMX")
    assert choose_precision("auto", "cpu").name == "bf16" and measured.calls == 1


def test_forced_bf16_on_emulating_cpu_warns_with_the_slowdown(cpu_with, measured):
    cpu_with(avx512_bf16=False, amx=False)
    with pytest.warns(UserWarning, match="about 20x slower than fp32"):
        choice = choose_precision("bf16", "cpu")
    assert (choice.name, choice.generation) == ("bf16", "bf16") and measured.calls == 0


def test_forced_precisions_are_both_stages_and_measure_nothing(cpu_with, measured):
    cpu_with(avx512_bf16=True, amx=False)
    measured.set(train=0.5, decode=0.5)  # auto would say fp32: a forced bf16 is kept anyway
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bf16, fp32 = choose_precision("bf16", "cpu"), choose_precision("fp32", "cpu")
    assert (bf16.name, bf16.generation, bf16.generation_dtype) == ("bf16", "bf16", torch.bfloat16)
    assert (fp32.name, fp32.generation, fp32.generation_dtype) == ("fp32", "fp32", None)
    assert measured.calls == 0


def test_cpu_flags_are_read_where_torch_lacks_the_checks(cpu_with, monkeypatch):
    cpu_with(avx512_bf16=False, amx=False)
    monkeypatch.delattr(torch.cpu, "_is_avx512_bf16_supported", raising=False)
    monkeypatch.setattr(machine, "_cpu_flags", lambda: {"avx2", "fma"})
    assert choose_precision("auto", "cpu").name == "fp32"
    monkeypatch.setattr(machine, "_cpu_flags", lambda: {"avx2", "avx512f", "amx_bf16"})
    assert choose_precision("auto", "cpu").name == "bf16"  # native: measured (bf16 2x faster, mocked)


def test_cuda_keeps_the_capability_rule_without_measuring(monkeypatch, measured):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla V100")
    choice = choose_precision("auto", "cuda:0")
    assert (choice.name, choice.generation, choice.vllm_dtype) == ("fp32", "fp32", "float32")
    with pytest.raises(ValueError, match="Tesla V100 does not support bf16"):
        choose_precision("bf16", "cuda:0")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    choice = choose_precision("auto", "cuda:0", (576, 1536))
    assert (choice.name, choice.generation, choice.vllm_dtype) == ("bf16", "bf16", "bfloat16")
    assert choice.reason == "precision auto -> bf16: Tesla V100 supports bf16" and measured.calls == 0


def test_unknown_precision_name():
    with pytest.raises(ValueError, match="'fp16' is not one of"):
        choose_precision("fp16", "cpu")


def _trainer(trainer: dict):
    raw = tiny_recipe(Path("tiny-model"), Path("x.jsonl"))
    raw["trainer"] = trainer
    return resolve(raw).trainer


def test_config_default_is_auto_and_precision_is_one_key():
    assert _trainer({}).precision == "auto"
    assert _trainer({"precision": "fp32"}).precision == "fp32"
    with pytest.raises(RecipeError, match="unknown key 'trainer.bf16'"):
        _trainer({"bf16": False})
    with pytest.raises(RecipeError, match="precision"):
        _trainer({"precision": "fp16"})


def test_the_choice_is_announced_once_on_stderr(capsys):
    from rlvr.models.precision import PrecisionChoice, announce_precision

    choice = PrecisionChoice("fp32", "precision fp32 (set in the recipe): test-only reason 1f3a")
    assert choice.generation == "fp32"  # one name: both stages
    announce_precision(choice)
    announce_precision(choice)
    out, err = capsys.readouterr()
    assert out == "" and err == "[rlvr] precision fp32 (set in the recipe): test-only reason 1f3a\n"


def test_only_implausible_figures_are_measured_again_and_the_load_is_recorded(cpu_with, measured, monkeypatch):
    """A cached measurement is kept whatever the load it was taken at (the choice, and with it the numbers a seed
    gives, stays the same on every run of the machine); figures no idle core gives (here 0.01 GB/s of weights) are
    measured again."""
    cpu_with(avx512_bf16=True, amx=False)
    cal = calibrate((576, 1536))
    assert measured.calls == 1 and cal.load is not None and cal.measured_at
    data = json.loads(cal.path.read_text())
    _new_process(monkeypatch)
    cal.path.write_text(json.dumps({**data, "load": 6.5}))  # measured on a busy machine
    again = calibrate((576, 1536))
    assert again.cached and measured.calls == 1 and again.when().endswith("at load 6.5 a core")
    _new_process(monkeypatch)
    cal.path.write_text(json.dumps({**data, "decode_s": {"fp32": 1e3, "bf16": 5e2}}))
    assert not calibrate((576, 1536)).cached and measured.calls == 2

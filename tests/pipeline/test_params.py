import pytest

from where223.gpt2.reproduce import ReproduceSettings
from where223.pipeline import params
from where223.pipeline.params import ParameterError

GOOD = dict(path="onnx_export", preset="tiny", device="cpu", amp_dtype="auto", batch_size=2, seq_len=16,
            opset=17, seed=0)


def test_auto_resolves_to_bf16_on_cpu():
    settings = ReproduceSettings.resolve(**GOOD)
    assert (settings.device, settings.amp_dtype) == ("cpu", "bf16")
    assert settings.run_name() == "tiny-cpu-bf16-onnx_export"


def test_auto_resolves_to_fp16_on_cuda(monkeypatch):
    monkeypatch.setattr(params, "cuda_available", lambda: True)
    assert params.resolve_device("auto") == "cuda"
    assert params.resolve_amp_dtype("auto", "cuda") == "fp16"


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ({"path": "torchscript"}, "parameter path='torchscript' is not allowed; choose one of ['ort_trainer'"),
        ({"preset": "gpt3"}, "parameter model_preset='gpt3' is not allowed; choose one of ['gpt2', 'tiny']"),
        ({"amp_dtype": "int8"}, "parameter amp_dtype='int8' is not allowed"),
        ({"amp_dtype": "fp16"}, "parameter amp_dtype='fp16' is not supported on device='cpu'"),
        ({"opset": 12}, "parameter opset=12 is not allowed; choose one of [14, 15, 16, 17]"),
        ({"seq_len": 65}, "parameter seq_len=65 must be an integer in [2, 64]"),
        ({"batch_size": 0}, "parameter batch_size=0 must be an integer in [1, 4096]"),
    ],
)
def test_bad_parameters_fail_at_once_naming_the_parameter(override, named):
    with pytest.raises(ValueError) as caught:
        ReproduceSettings.resolve(**{**GOOD, **override})
    assert named in str(caught.value)


def test_cuda_without_gpu_says_what_to_do(monkeypatch):
    monkeypatch.setattr(params, "cuda_available", lambda: False)
    with pytest.raises(ParameterError, match="torch sees no CUDA GPU; use device='auto' or device='cpu'"):
        ReproduceSettings.resolve(**{**GOOD, "device": "cuda"})

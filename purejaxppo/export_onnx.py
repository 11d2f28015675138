"""The ONNX format's own part of purejaxppo.export (the optional extra `onnx`, jax2onnx and
onnxruntime: `pip install -e ".[onnx]"` in a clone): the check that both are installed, the
conversion of the policy function, and a file loaded back with onnxruntime. It imports
neither package until asked; purejaxppo.export words a conversion's fault and verifies the file."""

from __future__ import annotations

import importlib
import logging
from typing import Callable

from purejaxppo.errors import ConfigError
from purejaxppo.extras import install_line

ONNX_PACKAGES = ("jax2onnx", "onnxruntime")
VERSIONS = ("jax2onnx", "onnx", "onnxruntime")  # named in an ONNX file's metadata, beside jax's
LOAD = "onnxruntime.InferenceSession(file).run(None, {name: input, ...})"  # the metadata's `load`


def check_onnx_installed() -> None:
    """ONNX export needs jax2onnx and onnxruntime (the `onnx` extra): else one line saying so."""
    for name in ONNX_PACKAGES:
        try:
            importlib.import_module(name)
        except ImportError:
            raise ConfigError("format", "onnx", f"needs {name}, which is not installed: "
                              f"{install_line('onnx')} (jax2onnx and onnxruntime)") from None


def to_onnx(fn: Callable, inputs: list, input_names: list[str], output_names: list[str]):
    """`fn` converted by jax2onnx for `inputs` (shapes and dtypes; a symbolic batch axis): the
    ONNX model. A converter's fault is raised as it comes."""
    import jax2onnx

    quiet = logging.getLogger("onnx_ir")  # it warns of intermediate values it gives no type, harmlessly
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        return jax2onnx.to_onnx(fn, inputs, model_name="purejaxppo_policy", input_names=input_names,
                                output_names=output_names)
    finally:
        quiet.setLevel(level)


def onnx_runner(data: bytes) -> Callable[[list], list]:
    """The ONNX file `data` loaded by onnxruntime (on the CPU): inputs (numpy, in order) -> outputs."""
    import onnxruntime

    session = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return lambda inputs: session.run(None, dict(zip(names, inputs)))

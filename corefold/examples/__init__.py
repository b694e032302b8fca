"""Bundled example models: ``example_path("tiny_cnn")`` is the default model of the README."""

from importlib import resources
from pathlib import Path


def example_path(name: str = "tiny_cnn") -> Path:
    """Path of a bundled example model (``tiny_cnn``: built by tools/make_example.py)."""
    return Path(str(resources.files("corefold.examples").joinpath(f"{name}.onnx")))

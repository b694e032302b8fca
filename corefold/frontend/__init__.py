"""Model frontends. ``corefold.frontend.onnx`` reads and writes ONNX.

``load_model``/``from_onnx``/``to_onnx``/``save_model`` are re-exported here lazily so that
importing ``corefold.frontend`` does not import ``onnx``.
"""

__all__ = ["load_model", "from_onnx", "to_onnx", "save_model"]


def __getattr__(name: str):
    if name in __all__:
        from corefold.frontend import onnx as _onnx

        return getattr(_onnx, name)
    raise AttributeError(name)

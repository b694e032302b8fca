"""Import/export speed and size on the nine light models, next to ONNX's own tools.

Per model: corefold import (normalise to opset 21, infer shapes, fold) and export times,
and the same model through onnx.version_converter (to opset 21) + shape inference with
data propagation, the nearest ONNX-native equivalent; the ratio is corefold / ONNX.
Also the exported file size relative to the original. Run:

    PYTHONPATH=$PWD python bench/frontend_onnx.py
"""

from __future__ import annotations

import glob
import os
import time

import onnx

from corefold.frontend.onnx import from_onnx, to_onnx


def best_of(fn, repeat=3):
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def main() -> None:
    light = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    print(f"{'model':<26}{'nodes':>6}{'import ms':>11}{'export ms':>11}{'onnx ms':>10}{'ratio':>8}{'size':>8}")
    for path in sorted(glob.glob(os.path.join(light, "*.onnx"))):
        model = onnx.load(path)
        t_imp, graph = best_of(lambda m=model: from_onnx(m))
        t_exp, exported = best_of(lambda g=graph: to_onnx(g))

        def onnx_native(m=model):
            conv = onnx.version_converter.convert_version(m, 21)
            return onnx.shape_inference.infer_shapes(conv, data_prop=True)

        t_onnx, _ = best_of(onnx_native)
        print(f"{os.path.basename(path)[6:-5]:<26}{len(graph):>6}{t_imp * 1e3:>11.1f}{t_exp * 1e3:>11.1f}"
              f"{t_onnx * 1e3:>10.1f}{(t_imp + t_exp) / t_onnx:>8.2f}{exported.ByteSize() / model.ByteSize():>8.2f}")


if __name__ == "__main__":
    main()

"""ONNX import and export: the only corefold package that imports ``onnx``.

``load_model(path, shapes, values=...)`` / ``from_onnx(model, shapes, values=...)`` give an
IR graph in canonical form (``values`` binds inputs to constants folded at import);
``to_onnx(graph)`` / ``save_model(graph, path)`` write one back.

IR conventions the importer guarantees (kernels and passes rely on them):

* ``graph.opset == 21``: every node has ONNX opset-21 semantics, whatever the model's
  opset (6 to 28; 1 to 5 when nothing in the model changed before 6). If, Loop and Scan
  are inlined or unrolled (their decisions must be constants). Attributes that opset 21 takes as inputs are constant inputs (Clip
  min/max, Squeeze/Unsqueeze/Reduce* axes, Slice starts/ends/axes, Pad pads/value,
  Dropout ratio); opset-6 ``broadcast``/``axis`` become NumPy broadcasting; Split always
  has its sizes as input 1; Upsample and Resize-10 are Resize (asymmetric, floor); Softmax's old coerce-to-2D semantics are rewritten as
  Flatten/Softmax/Reshape; ``auto_pad`` (Conv, pools, ConvTranspose) and ConvTranspose's
  ``output_shape`` are explicit ``pads``; BatchNormalization has one output and no
  ``spatial``/``consumed_inputs``/``is_test``.
* Attributes are Python ``int``/``float``/``str`` or lists of them; tensor attributes are
  ``np.ndarray``; element-type attributes (Cast ``to``, QuantizeLinear ``output_dtype``)
  are NumPy dtype names such as ``"float32"``. Only attributes present in the file are
  kept (besides the normalisations above): kernels apply ONNX defaults themselves.
* Missing optional inputs are ``None``; trailing ones are dropped.
* Every value has a static shape (tuple of ints) and a NumPy dtype. Constants are
  ``Value.const`` arrays; single-value constants (ConstantOfShape results, all-equal
  initializers) are read-only stride-0 ``np.broadcast_to`` arrays: never write into a
  constant, and use ``corefold.ops.is_fill`` to recognise them.
* Shape arithmetic and constant subgraphs are folded: no node has only constant inputs
  (except QuantizeLinear/DequantizeLinear, which mark quantized weights, and nodes whose
  kernel is not registered), and Shape nodes are gone.
* Initializers are constants, also when listed as graph inputs (IR version < 4 style):
  the graph inputs are only the true inputs. Node names stay unique (ONNX names kept
  where possible); value names are the ONNX names, so feeds and outputs keep their names.
"""

from corefold.frontend.onnx.exporter import save_model, to_onnx
from corefold.frontend.onnx.importer import from_onnx, load_model

__all__ = ["load_model", "from_onnx", "to_onnx", "save_model"]

"""``corefold.aten``: PyTorch aten operators with no ONNX counterpart (SPEC M2's torch graphs).

``corefold.frontend.torch`` imports a PyTorch training step; aten operators it cannot write
as ONNX operators keep their aten name in this domain. The set is open-ended (whatever the
traced model calls), so it is an open domain of the table
(:func:`~corefold.ops.registry.open_domain`): the entry of a name is made the first time
it is looked up. Every such entry: no ONNX form (``normalise`` NONE), the shapes
PyTorch's fake tensors recorded are authoritative (``infer`` NONE), no NumPy kernel
(``corefold.frontend.torch.interpret`` runs them with torch itself), one vector operation
per output element for the generic cost model (the GPU roofline takes their FLOPs from
``corefold.cost.aten``), never split or quantized. O(1) per name.
"""

from __future__ import annotations

from corefold.ops.facets import prod
from corefold.ops.registry import open_domain
from corefold.ops.schema import NONE, Cost, OpDef

DOMAIN = "corefold.aten"

#: one vector operation per element of every output
ELEMENTWISE = Cost("vector", lambda attrs, ins, outs: float(sum(prod(shape) for shape, _ in outs)))


@open_domain(DOMAIN)
def aten_entry(op_type: str) -> OpDef:
    """The table entry of aten operator ``op_type``."""
    return OpDef(op_type, domain=DOMAIN, normalise=NONE, infer=NONE, kernel=NONE, cost=ELEMENTWISE,
                 split=NONE, quant=NONE, param_inputs=(), foldable=False)

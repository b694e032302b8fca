"""``corefold.int``: an operator computed on integers inside lowering.

The backend fuses each ``DequantizeLinear -> op [-> Relu] -> QuantizeLinear`` pattern that
corefold's integer runner computes in integers into one node of this domain on the integer
tensors (``corefold.backend.tile``); its quantization lives in the node's ``meta["quant"]``.
Such a node costs what its float operator costs and is cut along the same axes; its output
type is the quantized one recorded by the backend (``infer`` is NONE: stored shapes are
authoritative), and it runs only through the backend's integer kernels (no plain kernel).
One entry per operator the integer runner handles (its ``quant.integer`` kind is set),
made once the float entries exist.
"""

from __future__ import annotations

from corefold.ops.registry import define, derive
from corefold.ops.schema import NONE, OpDef, Quant

DOMAIN = "corefold.int"


@derive
def _integer_entries(table) -> None:
    for (domain, _), base in sorted(table.items()):
        if domain == "" and isinstance(base.quant, Quant) and base.quant.integer:
            define(OpDef(base.op_type, domain=DOMAIN, normalise=NONE, infer=NONE, kernel=NONE, cost=base.cost,
                         split=base.split, quant=NONE, param_inputs=base.param_inputs))

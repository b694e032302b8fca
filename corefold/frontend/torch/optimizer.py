"""An optimizer step appended to an imported training step.

For every gradient output ``grad.P`` of parameter input ``P``: ``sgd`` adds one node
``_fused_sgd(P, grad.P) -> P'``; ``adam`` adds inputs ``adam.exp_avg.P`` and
``adam.exp_avg_sq.P`` (the moments, same shape as ``P``) and ``_fused_adam(P, grad.P, m, v)
-> (P', m', v')``. They write in place (``meta["inplace"]``, as PyTorch's fused optimizers
do), so the updated tensors share their inputs' memory; the gradients die at the step and
the updated tensors replace them as outputs. O(parameters).
"""

from __future__ import annotations

from corefold.errors import CorefoldError
from corefold.ir import Graph, Node, Value
from corefold.ir.domains import ATEN_DOMAIN


def add_optimizer(graph: Graph, optimizer: str) -> Graph:
    """Append ``optimizer`` (``none``, ``sgd`` or ``adam``) to ``graph`` in place.

    Raises:
        CorefoldError: an unknown optimizer name.
    """
    if optimizer == "none":
        return graph
    if optimizer not in ("sgd", "adam"):
        raise CorefoldError(f"--optimizer {optimizer!r}: expected none, sgd or adam")
    inputs = {v.name: v for v in graph.inputs}
    outputs = []
    for out in graph.outputs:
        pname = out.name[len("grad."):] if out.name.startswith("grad.") else None
        if pname is None or pname not in inputs:
            outputs.append(out)
            continue
        p = inputs[pname]
        ins = [p, out]
        if optimizer == "adam":
            ins += [graph.add_input(f"adam.exp_avg.{pname}", p.shape, p.dtype),
                    graph.add_input(f"adam.exp_avg_sq.{pname}", p.shape, p.dtype)]
        outs = [Value(f"new.{pname}", p.shape, p.dtype)]
        inplace = [[0, 0]]
        if optimizer == "adam":
            outs += [Value(f"new.adam.exp_avg.{pname}", p.shape, p.dtype),
                     Value(f"new.adam.exp_avg_sq.{pname}", p.shape, p.dtype)]
            inplace += [[1, 2], [2, 3]]
        node = Node(f"_fused_{optimizer}", ins, outs, {}, name=f"{optimizer}.{pname}", domain=ATEN_DOMAIN)
        node.meta.update({"inplace": inplace, "phase": "optimizer"})
        graph.add_node(node)
        outputs += outs
    graph.outputs = outputs
    return graph

"""corefold's intermediate representation: values, nodes, graphs, and their invariants.

Split by concern: ``values`` (tensors and their uses), ``nodes`` (operators and control
edges), ``graph`` (containers, stable topological order), ``analysis`` (dominators),
``verify`` (every invariant), ``text`` (a text form that parses back).
"""

from corefold.ir.analysis import dominator_chain, dominators, post_dominators
from corefold.ir.graph import Graph
from corefold.ir.nodes import Node
from corefold.ir.text import TextParseError, parse, to_text
from corefold.ir.values import Usage, Value
from corefold.ir.verify import VerifyError, verify

__all__ = [
    "Graph", "Node", "Value", "Usage", "verify", "VerifyError", "parse", "to_text", "TextParseError",
    "dominators", "post_dominators", "dominator_chain",
]

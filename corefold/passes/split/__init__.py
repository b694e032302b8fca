"""Operator splitting (SPEC M3 §7): ``rules`` says where an operator may be cut,
``split`` cuts operators until each fits a core's memory."""

from corefold.passes.split.rules import SplitAxis, candidate_axes
from corefold.passes.split.split import (
    SplitPass,
    SplitResult,
    SplitSettings,
    choose_split,
    split_graph,
    touched_bytes,
)

__all__ = ["split_graph", "SplitResult", "SplitPass", "SplitSettings", "choose_split", "touched_bytes",
           "candidate_axes", "SplitAxis"]

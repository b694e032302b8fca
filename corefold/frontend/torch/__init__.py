"""PyTorch training steps into the IR (the ``torch`` extra): forward and backward joint
graphs traced by ``torch._functorch.aot_autograd`` under ``FakeTensorMode``, with no GPU,
no real weights and nothing fetched.

``load_torch("torchvision:resnet50", batch=32)`` gives the IR of one training step;
``trace`` builds and traces it, ``importer`` converts the aten graph, ``optimizer`` adds an
SGD or Adam step, and ``interpret`` runs an imported graph with PyTorch's own aten
operators (to check transformed graphs against the original).
"""

import importlib

# The names are resolved on first use (PEP 562), so importing the package, as pytest does
# to collect ``torch_test.py``, needs no torch; using one without the extra raises ImportError.
_LAZY = {
    "from_joint": "corefold.frontend.torch.importer",
    "add_optimizer": "corefold.frontend.torch.optimizer",
    "build_step": "corefold.frontend.torch.trace",
    "trace_spec": "corefold.frontend.torch.trace",
    "trace_step": "corefold.frontend.torch.trace",
}
__all__ = ["load_torch", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def load_torch(spec: str, batch: int | None = None, seq: int | None = None, optimizer: str = "none"):
    """The IR graph of one training step of ``spec`` (see :mod:`corefold.frontend.torch.trace`).

    ``optimizer``: ``none`` (the gradients are outputs), ``sgd`` or ``adam`` (an in-place
    step per parameter; Adam's two moment tensors are inputs and count in memory).

    Raises:
        CorefoldError: a bad spec or size; ModelError: PyTorch cannot trace it;
            UnsupportedOpError: an operator or dtype the IR cannot hold.
    """
    from corefold.frontend.torch.importer import from_joint
    from corefold.frontend.torch.optimizer import add_optimizer
    from corefold.frontend.torch.trace import trace_spec

    traced = trace_spec(spec, batch, seq)
    graph = from_joint(traced.gm, traced.input_names, traced.output_names)
    graph.name = spec.replace(":", "_").replace("-", "_")
    graph.metadata["corefold.torch"] = spec
    return add_optimizer(graph, optimizer)


__all__ = ["load_torch", "from_joint", "trace_spec", "trace_step", "build_step", "add_optimizer"]

"""Build a training step from a spec and trace its joint forward and backward graph.

Specs: ``torchvision:NAME`` (any ``torchvision.models`` builder, e.g. ``resnet50``,
``vgg16``; images ``[batch, 3, 224, 224]``, cross-entropy over 1000 classes) and
``transformers:bert-base`` (``BertConfig()``, i.e. BERT-base, as ``BertForPreTraining``
with eager attention; token ids ``[batch, seq]``, masked-LM and next-sentence losses).
Everything is built from configurations in code under ``FakeTensorMode``: no weights are
downloaded or allocated, and nothing is fetched. Tied parameters (BERT's decoder and
word embeddings) enter once: the step is a module holding each distinct parameter and
buffer once, calling the model through ``torch.func.functional_call``. The trace is
``aot_export_module(..., trace_joint=True)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch._functorch.aot_autograd import aot_export_module
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.func import functional_call

from corefold.errors import CorefoldError, ModelError

IMAGE_CLASSES = 1000


class TrainingStep(torch.nn.Module):
    """``loss_fn(call, *inputs)`` on ``model`` with each distinct tensor registered once.

    ``alias`` maps every parameter and buffer name of the model (tied duplicates included)
    to the key it is registered under here (``p0``, ``b7``...); ``first_name`` maps a key to
    the model's first name for it; ``call(*args, **kwargs)`` runs the model on them.
    """

    def __init__(self, model: torch.nn.Module, loss_fn):
        super().__init__()
        self._model = [model]  # not a submodule: its tensors are registered below once
        self._loss_fn = loss_fn
        self.alias: dict[str, str] = {}
        self.first_name: dict[str, str] = {}
        first: dict[int, str] = {}
        for kind, items in (("p", model.named_parameters(remove_duplicate=False)),
                            ("b", model.named_buffers(remove_duplicate=False))):
            for name, t in items:
                if id(t) not in first:
                    key = first[id(t)] = f"{kind}{len(first)}"
                    self.first_name[key] = name
                    if kind == "p":
                        self.register_parameter(key, t)
                    else:
                        self.register_buffer(key, t)
                self.alias[name] = first[id(t)]

    def forward(self, *inputs):
        tensors = {name: getattr(self, key) for name, key in self.alias.items()}

        def call(*args, **kwargs):
            return functional_call(self._model[0], tensors, args, kwargs)

        return (self._loss_fn(call, *inputs),)


@dataclass
class Traced:
    """A traced training step: the fx joint graph, its signature and readable names."""

    gm: object
    signature: object
    input_names: dict[str, str]
    output_names: list[str]
    parameters: list[str]


def _torchvision(name: str, batch: int):
    import torchvision

    builder = getattr(torchvision.models, name, None)
    if builder is None or not callable(builder) or name.startswith("_"):
        raise CorefoldError(f"--torch torchvision:{name}: no such torchvision model")
    model = builder(weights=None)
    x = torch.randn(batch, 3, 224, 224)
    y = torch.randint(0, IMAGE_CLASSES, (batch,))

    def loss(call, x, y):
        return torch.nn.functional.cross_entropy(call(x), y)

    return model, [x, y], ["images", "labels"], loss


def _transformers(name: str, batch: int, seq: int):
    import transformers

    if name not in ("bert-base", "bert"):
        raise CorefoldError(f"--torch transformers:{name}: only bert-base is built in (BertConfig())")
    config = transformers.BertConfig(attn_implementation="eager")
    if seq > config.max_position_embeddings:
        raise CorefoldError(f"--seq {seq}: BERT-base has {config.max_position_embeddings} positions")
    model = transformers.BertForPreTraining(config)
    ids = torch.randint(0, config.vocab_size, (batch, seq))
    nsp = torch.randint(0, 2, (batch,))

    def loss(call, ids, nsp):
        return call(input_ids=ids, labels=ids, next_sentence_label=nsp).loss

    return model, [ids, nsp], ["input_ids", "next_sentence_label"], loss


def build_step(spec: str, batch: int | None = None, seq: int | None = None):
    """(model, example inputs, input names, loss fn) for ``spec``; call under FakeTensorMode.

    Raises:
        CorefoldError: an unknown spec or model, or bad sizes.
    """
    family, sep, name = spec.partition(":")
    if not sep or not name:
        raise CorefoldError(f"--torch {spec!r}: expected torchvision:NAME or transformers:NAME")
    if family == "torchvision":
        b = 32 if batch is None else batch
        if b < 1:
            raise CorefoldError(f"--batch {b}: must be >= 1")
        return _torchvision(name, b)
    if family == "transformers":
        b, s = (8 if batch is None else batch), (512 if seq is None else seq)
        if b < 1 or s < 1:
            raise CorefoldError(f"--batch {b} --seq {s}: must be >= 1")
        return _transformers(name, b, s)
    raise CorefoldError(f"--torch {spec!r}: the family must be torchvision or transformers")


def trace_step(model: torch.nn.Module, inputs: list, input_names: list[str], loss_fn) -> Traced:
    """The joint graph of one training step (the model in train mode).

    Raises:
        ModelError: PyTorch cannot trace it.
    """
    model.train()
    step = TrainingStep(model, loss_fn)
    try:
        gm, sig = aot_export_module(step, inputs, trace_joint=True, output_loss_index=0)
    except Exception as exc:  # noqa: BLE001 - any tracing failure is the model's
        raise ModelError(f"PyTorch could not trace the training step: {type(exc).__name__}: "
                         f"{' '.join(str(exc).split())[:300]}") from None
    first_name = step.first_name
    names: dict[str, str] = {}
    for ph, key in list(sig.inputs_to_parameters.items()) + list(sig.inputs_to_buffers.items()):
        names[ph] = first_name[key]
    for ph, user in zip(sig.user_inputs, input_names, strict=True):
        names[ph] = user
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    grads = sig.backward_signature.gradients_to_parameters if sig.backward_signature else {}
    user = {name: ("loss" if i == 0 else f"out{i}") for i, name in enumerate(sig.user_outputs)}
    out_names = []
    for i, x in enumerate(out_node.args[0]):
        key = getattr(x, "name", None)
        if key in grads:
            out_names.append(f"grad.{first_name[grads[key]]}")
        elif key in sig.buffers_to_mutate:
            out_names.append(f"new.{first_name[sig.buffers_to_mutate[key]]}")
        else:
            out_names.append(user.get(key, f"out{i}"))
    params = [first_name[k] for k in sig.parameters]
    return Traced(gm, sig, names, out_names, params)


def trace_spec(spec: str, batch: int | None = None, seq: int | None = None) -> Traced:
    """Build ``spec`` under ``FakeTensorMode`` and trace its training step."""
    with FakeTensorMode(allow_non_fake_inputs=False):
        model, inputs, names, loss = build_step(spec, batch, seq)
        return trace_step(model, inputs, names, loss)

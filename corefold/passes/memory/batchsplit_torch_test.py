"""Batch splitting on aten training graphs, checked with torch itself: a masked-LM-style
head (log-softmax, NLL loss with ignored labels) and a VGG-style CNN (convolution, ReLU and
max-pool backward)."""

import pytest

torch = pytest.importorskip("torch")

from corefold.frontend.torch import from_joint, trace_step  # noqa: E402
from corefold.frontend.torch.interpret import run_torch  # noqa: E402
from corefold.ir import verify  # noqa: E402
from corefold.ir.domains import MEMORY_DOMAIN  # noqa: E402
from corefold.passes.memory import MemorySettings, plan_memory  # noqa: E402
from corefold.passes.memory.batchsplit import find_region, split_region  # noqa: E402
from corefold.passes.memory.memory_pass import clone_graph  # noqa: E402
from corefold.passes.memory.memsim import floor_bytes  # noqa: E402
from corefold.passes.memory.program import build_program  # noqa: E402
from corefold.target import load_target  # noqa: E402

B, S, H, V = 4, 8, 16, 300
EPS = 2.0 ** -24


class _Head(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(V, H)
        self.dense = torch.nn.Linear(H, H)
        self.dec = torch.nn.Linear(H, V)

    def forward(self, ids):
        return self.dec(torch.tanh(self.dense(self.emb(ids))))


def _step(model, inputs, names, loss):
    traced = trace_step(model, inputs, names, loss)
    g = from_joint(traced.gm, traced.input_names, traced.output_names)
    tensors = {**dict(model.named_parameters()), **dict(zip(names, inputs, strict=True))}
    return g, {v.name: tensors[v.name].detach().clone() for v in g.inputs}


def _cut(g, k):
    g2 = clone_graph(g)
    p = build_program(g2)
    _, step = floor_bytes(p)
    region = find_region(p, p.compute[step])
    split_region(g2, p, region, k)
    verify(g2)
    return g2, region


def _summed(g) -> set[str]:
    """Graph outputs joined by summing pieces (not by concatenating them), through views
    and swaps."""
    out = set()
    for v in g.outputs:
        n = v.producer
        while n is not None and (n.domain == MEMORY_DOMAIN or n.meta.get("view")) and n.meta.get("batch_split") != "join":
            n = n.inputs[0].producer
        if n is not None and n.meta.get("batch_split") == "join" and n.op_type != "Concat":
            out.add(v.name)
    return out


def _check(ref, out, summed: set[str], n_terms: int):
    """Gradients not summed over the pieces are bit-identical; summed ones differ by at most
    a reassociation of ``n_terms`` additions (relative to the largest magnitude)."""
    for name, want in ref.items():
        got = out[name]
        if name in summed:
            tol = 2 * n_terms * EPS * float(want.abs().max()) * 4 + 1e-12
            assert float((got - want).abs().max()) <= tol, name
        else:
            assert torch.equal(got, want), name


def _close(ref, out, rel: float = 1e-5):
    for name, want in ref.items():
        assert float((out[name] - want).abs().max()) <= rel * float(want.abs().max()), name


def test_masked_lm_head_cut_into_pieces_matches_torch():
    torch.manual_seed(0)
    model = _Head()
    ids = torch.randint(0, V, (B, S))
    labels = ids.clone()
    labels[:, ::3] = -100  # ignored positions: the NLL loss's total weight counts the rest

    def loss(call, i, y):
        return torch.nn.functional.cross_entropy(call(i).view(-1, V), y.view(-1))

    g, feeds = _step(model, [ids, labels], ["ids", "labels"], loss)
    ref = run_torch(g, feeds)
    g2, region = _cut(g, 3)
    ops = {n.op_type for n in region.ops}
    assert {"nll_loss_forward", "nll_loss_backward", "_log_softmax_backward_data", "LogSoftmax"} <= ops
    assert len(region.groups) == 2  # the backward waits for the summed total weight
    out = run_torch(g2, feeds)
    # the loss is a sum over pieces divided by the summed weight; dec's gradients are summed
    assert _summed(g2) == {"loss", "grad.dec.weight", "grad.dec.bias"}
    _check(ref, out, _summed(g2), B * S)
    assert floor_bytes(build_program(g2))[0] < floor_bytes(build_program(g))[0]


def test_vgg_style_cnn_cut_into_pieces_matches_torch():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(inplace=True),
        torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.ReLU(inplace=True), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 4, 3, padding=1), torch.nn.ReLU(inplace=True), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(4 * 8 * 8, 10))
    x, y = torch.randn(6, 3, 32, 32), torch.randint(0, 10, (6,))
    g, feeds = _step(model, [x, y], ["images", "labels"],
                     lambda call, a, b: torch.nn.functional.cross_entropy(call(a), b))
    ref = run_torch(g, feeds)
    g2, region = _cut(g, 4)
    ops = {n.op_type for n in region.ops}
    assert {"Conv", "convolution_backward", "threshold_backward", "max_pool2d_with_indices_backward"} <= ops
    # convolution weight and bias gradients are summed over the pieces; and torch's CPU
    # convolution of fewer images may round differently (another algorithm), so values
    # after a cut convolution are within its rounding, not bit-identical: compare relatively
    assert _summed(g2) == {f"grad.{i}.{p}" for i in (0, 2, 5) for p in ("weight", "bias")}
    _close(ref, run_torch(g2, feeds))
    # planned below the unsplit floor: the plan cuts, fits, and still matches torch
    floor, _ = floor_bytes(build_program(g))
    res = plan_memory(clone_graph(g), load_target("gpu-nvlink"), MemorySettings(budget_bytes=int(floor * 0.9)))
    assert res.report["split"]["ops"] and res.report["peak_after"] <= int(floor * 0.9)
    assert res.report["floor"] < res.report["split"]["floor_unsplit"]
    _close(ref, run_torch(res.graph, feeds))

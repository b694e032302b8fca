"""The PyTorch frontend: joint graphs into the IR, run back with torch, swap plans checked
with torch itself, and the exported offload policy on a real CPU training step."""

import importlib.util
import sys

import pytest

torch = pytest.importorskip("torch")

from corefold.frontend.torch import from_joint, trace_step  # noqa: E402
from corefold.frontend.torch.interpret import run_torch  # noqa: E402
from corefold.ir import verify  # noqa: E402
from corefold.ir.domains import ATEN_DOMAIN, MEMORY_DOMAIN  # noqa: E402
from corefold.passes.memory import MemorySettings, measure, plan_memory  # noqa: E402
from corefold.passes.memory.memory_pass import clone_graph  # noqa: E402
from corefold.target import load_target  # noqa: E402


def _cnn():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(inplace=True),
        torch.nn.Conv2d(16, 16, 3, padding=1), torch.nn.ReLU(inplace=True), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(32 * 8 * 8, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))


def _loss(call, x, y):
    return torch.nn.functional.cross_entropy(call(x), y)


@pytest.fixture(scope="module")
def cnn_step():
    model = _cnn()
    x, y = torch.randn(16, 3, 32, 32), torch.randint(0, 10, (16,))
    traced = trace_step(model, [x, y], ["images", "labels"], _loss)
    graph = from_joint(traced.gm, traced.input_names, traced.output_names)
    tensors = {**dict(model.named_parameters()), **dict(model.named_buffers()), "images": x, "labels": y}
    feeds = {v.name: tensors[v.name].detach().clone() for v in graph.inputs}
    return model, x, y, graph, feeds


def _halfway(g, t):
    """A budget halfway between the floor and the peak."""
    from corefold.passes.memory.memsim import floor_bytes

    m = measure(g, t)
    floor, _ = floor_bytes(m.program)
    return (floor + m.step_peak) // 2


def _grads(model, x, y, hooks=None):
    model.zero_grad()
    if hooks is None:
        loss = _loss(model, x, y)
        loss.backward()
    else:
        with hooks:
            loss = _loss(model, x, y)
        loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


def test_imported_graph_reproduces_eager_gradients(cnn_step):
    model, x, y, graph, feeds = cnn_step
    verify(graph)
    ops = {(n.domain, n.op_type) for n in graph.nodes}
    assert ("", "Conv") in ops and (ATEN_DOMAIN, "convolution_backward") in ops and ("", "MaxPool") in ops
    phase = {n.name: n.meta.get("phase") for n in graph.nodes}
    convs = [n for n in graph.nodes if n.op_type == "Conv"]
    assert len(convs) == 3 and all(phase[c.name] == "forward" for c in convs)
    assert all(phase[n.name] == "backward" for n in graph.nodes if n.op_type == "convolution_backward")
    out = run_torch(graph, {k: v.clone() for k, v in feeds.items()})
    loss, grads = _grads(model, x.clone(), y)
    assert torch.equal(out["loss"], loss)
    for name, g in grads.items():
        assert torch.equal(out[f"grad.{name}"], g), name


def test_swap_plan_is_bit_exact_under_torch(cnn_step):
    _, _, _, graph, feeds = cnn_step
    g = clone_graph(graph)
    t = load_target("gpu")
    budget = _halfway(g, t)
    res = plan_memory(g, t, MemorySettings(budget_bytes=budget))
    verify(g)
    assert res.modified and res.report["peak_after"] <= budget
    assert any(n.domain == MEMORY_DOMAIN for n in g.nodes)
    want = run_torch(graph, {k: v.clone() for k, v in feeds.items()})
    got = run_torch(g, {k: v.clone() for k, v in feeds.items()})
    for k in want:
        assert torch.equal(want[k], got[k]), k


def test_exported_policy_keeps_gradients_and_moves_what_it_lists(cnn_step, tmp_path):
    from corefold.passes.memory.policy import offload_entries, write_policy

    model, x, y, graph, _ = cnn_step
    g = clone_graph(graph)
    g.metadata["corefold.torch"] = "test:cnn"
    t = load_target("gpu")
    res = plan_memory(g, t, MemorySettings(budget_bytes=_halfway(g, t)))
    entries, saved = offload_entries(res.graph)
    assert entries and len(saved) > len(entries)
    path = tmp_path / "policy.py"
    write_policy(res, path)
    spec = importlib.util.spec_from_file_location("corefold_test_policy", path)
    policy = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = policy
    spec.loader.exec_module(policy)
    loss0, grads0 = _grads(model, x, y)
    hooks = policy.offload()
    loss1, grads1 = _grads(model, x, y, hooks)
    assert torch.equal(loss0, loss1)
    for name in grads0:
        assert torch.equal(grads0[name], grads1[name]), name
    # every listed storage was found among the tensors PyTorch saved, and moved once
    assert hooks.offloaded == len(entries)
    assert hooks.offloaded_bytes == sum(e["bytes"] for e in entries)


def test_tied_weights_enter_once_and_bert_traces():
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=64, vocab_size=100, max_position_embeddings=64,
                                     attn_implementation="eager")
    torch.manual_seed(0)
    model = transformers.BertForPreTraining(config)
    ids, nsp = torch.randint(0, 100, (2, 16)), torch.randint(0, 2, (2,))

    def loss(call, ids, nsp):
        return call(input_ids=ids, labels=ids, next_sentence_label=nsp).loss

    traced = trace_step(model, [ids, nsp], ["input_ids", "next_sentence_label"], loss)
    graph = from_joint(traced.gm, traced.input_names, traced.output_names)
    verify(graph)
    names = [v.name for v in graph.inputs]
    assert "bert.embeddings.word_embeddings.weight" in names
    assert "cls.predictions.decoder.weight" not in names  # tied to the word embeddings
    ops = {n.op_type for n in graph.nodes}
    assert {"Softmax", "LayerNormalization", "Gemm", "native_dropout"} <= ops
    m = measure(graph, load_target("gpu"))
    assert m.step_peak > 0 and m.schedule.makespan > 0


def test_policy_tells_a_reused_address_from_the_offloaded_storage(tmp_path):
    # an offloaded storage may be freed in the forward pass and its address reused by the
    # next tensor of the same size: that one is a different saved storage (rank 1)
    from corefold.passes.memory.policy import render_policy

    nbytes = 1 << 22  # above malloc's mmap threshold: freed to the OS, the next mapping reuses it
    path = tmp_path / "p.py"
    path.write_text(render_policy([{"bytes": nbytes, "dtype": "float32", "rank": 0, "name": "a", "after": None}],
                                  "test", "test"))
    spec = importlib.util.spec_from_file_location("corefold_test_policy2", path)
    policy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(policy)
    hooks = policy.offload()
    a = torch.full((1 << 20,), 1.0)
    packed = hooks.pack(a)
    del a
    # new tensors of the same size, some likely at the freed address: none is the first
    later = [torch.full((1 << 20,), float(i)) for i in range(8)]
    assert all(hooks.pack(t) is t for t in later)
    assert torch.equal(hooks.unpack(packed), torch.full((1 << 20,), 1.0))
    assert hooks.offloaded == 1

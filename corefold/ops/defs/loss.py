"""NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (inference of the loss value).

``input`` is ``(N, C, d1, ..., dk)``, the integer ``target`` ``(N, d1, ..., dk)``. The loss of
one position is ``-input[n, target, d...] * weight[target]`` (weight 1 without the optional
``weight`` input), 0 where ``target == ignore_index``; ``reduction`` none keeps the loss per
position, sum adds them, mean divides that sum by the sum of the weights of the positions
not ignored. SoftmaxCrossEntropyLoss is the same on ``log_softmax(scores, axis=1)``, which
is its optional second output. Gathering the targets is one ``take_along_axis``:
O(elements of input).
"""

from __future__ import annotations

import numpy as np

from corefold.ops.facets import prod
from corefold.ops.registry import op
from corefold.ops.schema import AS_IS, FLOAT, Cost, Quant, SplitAxis


def _reduction(attrs) -> str:
    r = attrs.get("reduction", "mean")
    r = r.decode() if isinstance(r, bytes) else str(r)
    if r not in ("none", "sum", "mean"):
        raise ValueError(f"unknown reduction {r!r}")
    return r


def _check(x, t) -> None:
    if len(x) < 2 or tuple(t) != (x[0],) + tuple(x[2:]):
        raise ValueError(f"target {list(t)} does not fit input {list(x)} (want {[x[0]] + list(x[2:])})")


def _loss_infer(attrs, ins, consts):
    (x, dt), (t, _) = ins[0], ins[1]
    _check(x, t)
    if len(ins) > 2 and ins[2] is not None and tuple(ins[2][0]) != (x[1],):
        raise ValueError(f"weight {list(ins[2][0])} must have one value per class ({x[1]})")
    loss = tuple(t) if _reduction(attrs) == "none" else ()
    return [(loss, dt), (tuple(x), dt)]


def _loss_split(attrs, ins, outs, consts):
    """The batch, only without a reduction (a mean or sum reduces over it)."""
    x = ins[0][0]
    if _reduction(attrs) != "none" or x[0] < 2:
        return [], False
    cut = ((0, 1), (0, 1)) + ((None,) if len(ins) > 2 and ins[2] is not None else ())
    return [SplitAxis("batch", x[0], cut, (0, 1))], False


_FACETS = dict(normalise=AS_IS, infer=_loss_infer, split=_loss_split, quant=Quant(FLOAT), param_inputs=(1,),
               cost=Cost("vector", lambda attrs, ins, outs: 2 * prod(ins[0][0])))


def nll(log_prob: np.ndarray, target: np.ndarray, weight: np.ndarray | None, attrs) -> np.ndarray:
    """The negative log-likelihood loss of ``log_prob`` (see the module docstring)."""
    _check(log_prob.shape, target.shape)
    c = log_prob.shape[1]
    target = np.asarray(target).astype(np.int64)
    ignore = attrs.get("ignore_index")
    keep = np.ones(target.shape, bool) if ignore is None else target != int(ignore)
    safe = np.where(keep, target, 0)
    if keep.any() and (safe.min() < 0 or safe.max() >= c):
        raise ValueError(f"a target is outside [0, {c})")
    picked = np.take_along_axis(log_prob, safe[:, None], axis=1)[:, 0]
    w = (np.ones(target.shape, log_prob.dtype) if weight is None else np.asarray(weight)[safe]).astype(log_prob.dtype)
    w = np.where(keep, w, log_prob.dtype.type(0))
    loss = -picked * w
    reduction = _reduction(attrs)
    if reduction == "none":
        return loss.astype(log_prob.dtype, copy=False)
    if reduction == "sum":
        return np.asarray(loss.sum(), log_prob.dtype)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(loss.sum() / w.sum(), log_prob.dtype)


@op("NegativeLogLikelihoodLoss", **_FACETS)
def negative_log_likelihood_loss(attrs, inputs):
    """See the module docstring (input 0 holds log-probabilities)."""
    weight = inputs[2] if len(inputs) > 2 else None
    return [nll(inputs[0], inputs[1], weight, attrs)]


@op("SoftmaxCrossEntropyLoss", **_FACETS)
def softmax_cross_entropy_loss(attrs, inputs):
    """The NLL loss of ``log_softmax(scores, axis=1)``, and those log-probabilities."""
    x = inputs[0]
    d = x - x.max(axis=1, keepdims=True)
    log_prob = (d - np.log(np.exp(d).sum(axis=1, keepdims=True))).astype(x.dtype, copy=False)
    weight = inputs[2] if len(inputs) > 2 else None
    return [nll(log_prob, inputs[1], weight, attrs), log_prob]

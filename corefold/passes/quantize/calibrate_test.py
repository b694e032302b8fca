import numpy as np
import pytest

from corefold.errors import DataError
from corefold.ir import parse
from corefold.passes.quantize.calibrate import (
    CalibrationSet,
    NaNError,
    RunningHistogram,
    TensorStats,
    calibrate,
    load_calibration,
)
from corefold.passes.quantize.params import clip_magnitude, histogram_percentile


def test_histogram_streaming_matches_one_shot():
    rng = np.random.default_rng(0)
    parts = [rng.standard_normal(1000) * s for s in (0.1, 1.0, 5.0)]
    h = RunningHistogram(256)
    for p in parts:
        h.add(np.abs(p))
    allx = np.abs(np.concatenate(parts))
    assert h.counts.sum() == allx.size
    ref, _ = np.histogram(allx, bins=256, range=(0, h.top))
    # merged bins are exact except values on a bin edge
    assert np.abs(ref - h.counts).sum() <= 4
    assert abs(histogram_percentile(h, 50) - np.percentile(allx, 50)) <= 2 * h.top / 256


def test_mse_clips_outliers():
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.standard_normal(1_000_000), [50.0]])
    s = TensorStats()
    s.add(x)
    assert clip_magnitude(s, "minmax", 127) == 50.0
    m = clip_magnitude(s, "mse", 127)
    assert 2.0 < m < 10.0
    assert clip_magnitude(s, "percentile", 127, 99.0) == pytest.approx(np.percentile(np.abs(x), 99.0), rel=0.05)


G = """graph g opset 21
input x: float32[1, 3]
node r = Relu(x) -> (y: float32[1, 3])
output y
"""


def test_calibration_data_checks(tmp_path):
    g = parse(G)
    np.savez(tmp_path / "ok.npz", x=np.zeros((5, 3), np.float32))
    assert load_calibration(tmp_path / "ok.npz", g).num_samples == 5
    assert sum(1 for _ in load_calibration(tmp_path / "ok.npz", g).batches()) == 5
    np.savez(tmp_path / "bad.npz", x=np.zeros((5, 4), np.float32))
    with pytest.raises(DataError, match="shape"):
        load_calibration(tmp_path / "bad.npz", g)
    np.savez(tmp_path / "dt.npz", x=np.zeros((5, 3), np.float64))
    with pytest.raises(DataError, match="dtype"):
        load_calibration(tmp_path / "dt.npz", g)
    np.savez(tmp_path / "miss.npz", z=np.zeros((5, 3), np.float32))
    with pytest.raises(DataError, match="no array for input 'x'"):
        load_calibration(tmp_path / "miss.npz", g)


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_non_finite_calibration_inputs_are_the_users_error(tmp_path, bad):
    """Infinity is tolerated only where the model makes it (masks); in the user's data it is a
    DataError naming the input, from the file check and again from the calibration loop (a
    CalibrationSet need not come from load_calibration)."""
    g = parse(G)
    x = np.zeros((5, 3), np.float32)
    x[3, 1] = bad
    np.savez(tmp_path / "nf.npz", x=x)
    with pytest.raises(DataError, match="calibration array 'x' in .* holds NaN or infinity"):
        load_calibration(tmp_path / "nf.npz", g)
    data = CalibrationSet({"x": ((1, 3), np.dtype(np.float32))}, [tmp_path / "nf.npz"], [5])
    for engine in ("corefold", "onnxruntime"):
        with pytest.raises(DataError, match=r"calibration input 'x' holds NaN or infinity \(batch 3\)"):
            calibrate(g, data, ["x", "y"], engine=engine, progress=False)


@pytest.mark.filterwarnings("ignore:invalid value encountered in divide:RuntimeWarning")
def test_infinity_made_by_the_model_is_flagged_and_nan_refused(tmp_path):
    """A tensor taking -inf (a mask) keeps its range over the finite values and is flagged;
    NaN made inside the model is a DataError naming the tensor."""
    s = TensorStats()
    s.add(np.array([-np.inf, -2.0, 3.0, np.inf], np.float32))
    s.add(np.array([-np.inf], np.float32))  # nothing finite in this batch
    assert s.infinite and (s.minimum, s.maximum, s.count) == (-2.0, 3.0, 2)
    assert s.histogram.counts.sum() == 2
    with pytest.raises(NaNError):
        s.add(np.array([1.0, np.nan], np.float32))
    g = parse("""graph g opset 21
input x: float32[1, 3]
const ninf: float32[] = [-Infinity]
node lt = Less(x, ninf) -> (m: bool[1, 3])
node mask = Where(m, x, ninf) -> (a: float32[1, 3])
node div = Div(x, x) -> (d: float32[1, 3])
output a
output d
""")
    np.savez(tmp_path / "c.npz", x=np.array([[1.0, 2.0, 3.0], [0.0, 1.0, 2.0]], np.float32))
    data = load_calibration(tmp_path / "c.npz", g)
    stats = calibrate(g, data, ["a"], limit=1, progress=False)
    assert stats.tensors["a"].infinite and stats.tensors["a"].count == 0
    with pytest.raises(DataError, match="tensor 'd' takes NaN"):
        calibrate(g, data, ["d"], progress=False)  # 0 / 0 in the second batch


STATEFUL = """graph vad opset 21
input x: float32[1, 4]
input state: float32[2, 1, 4]
node add = Add(x, state) -> (y: float32[2, 1, 4])
output y
"""


def test_inputs_with_different_leading_dimensions_are_batched_by_their_own(tmp_path):
    """Silero VAD's audio is [1, 512] and its LSTM state [2, 1, 128]: a batch of the model
    takes one row of the audio and two of the state, so 3 batches are 3 + 6 rows (this was
    refused as "disagree on the number of samples")."""
    g = parse(STATEFUL)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    state = -np.arange(24, dtype=np.float32).reshape(6, 1, 4)
    np.savez(tmp_path / "c.npz", x=x, state=state)
    data = load_calibration(tmp_path / "c.npz", g)
    assert data.num_batches == 3 and data.num_samples == 3
    batches = list(data.batches())
    assert len(batches) == 3
    for j, feeds in enumerate(batches):
        np.testing.assert_array_equal(feeds["x"], x[j:j + 1])
        np.testing.assert_array_equal(feeds["state"], state[2 * j:2 * j + 2])
    assert len(list(data.batches(limit=2))) == 2
    np.savez(tmp_path / "odd.npz", x=x, state=state[:4])
    with pytest.raises(DataError, match=r"disagree on the number of batches: 3 for 'x', 2 for 'state' \(4 rows of 2\)"):
        load_calibration(tmp_path / "odd.npz", g)


def test_calibration_keeps_the_float_outputs_of_every_batch(tmp_path):
    """The corefold engine hands back each batch's graph outputs, equal to the executor's,
    so that the output-grid refit does not run the float model again; ONNX Runtime's
    engine keeps none."""
    from corefold.executor import run

    g = parse(STATEFUL)
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    state = np.random.default_rng(1).standard_normal((6, 1, 4)).astype(np.float32)
    np.savez(tmp_path / "c.npz", x=x, state=state)
    data = load_calibration(tmp_path / "c.npz", g)
    stats = calibrate(g, data, [], progress=False)
    assert len(stats.outputs) == 3
    for feeds, outs in zip(data.batches(), stats.outputs, strict=True):
        want = run(g, feeds)
        assert len(outs) == len(g.outputs)
        for v, got in zip(g.outputs, outs, strict=True):
            np.testing.assert_array_equal(got, want[v.name])
    assert calibrate(g, data, ["y"], engine="onnxruntime", progress=False).outputs == []

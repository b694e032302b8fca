import numpy as np

from corefold.cli import main
from corefold.mapping.testing import conv_like_graph


def _write(path, topo):
    np.savez(path, indptr=topo.indptr, indices=topo.indices, weights=topo.weights,
             neuron_sizes=topo.neuron_sizes, synapses=topo.synapses)


def test_map_writes_core_xy_and_prints_summary(tmp_path, capsys):
    topo = conv_like_graph(900, 3)
    src = tmp_path / "g.npz"
    _write(src, topo)
    out = tmp_path / "m.npz"
    rc = main(["map", str(src), "-o", str(out), "--mesh", "3x3", "--neurons-per-core", "110",
               "--synapses-per-core", "800", "--preset", "fast", "--seed", "3", "--no-progress"])
    assert rc == 0
    z = np.load(out)
    xy = z["core_xy"]
    assert xy.shape == (900, 2) and xy.min() >= 0 and xy.max() <= 2
    core = xy[:, 1] * 3 + xy[:, 0]
    assert np.bincount(core).max() <= 110
    assert np.bincount(core, weights=topo.synapses).max() <= 800
    assert z["traffic"] >= z["lower_bound"] >= z["cut"] > 0
    text = capsys.readouterr().out
    for key in ("cut", "hop-weighted traffic", "lower bound", "max link load", "fill neurons", "time"):
        assert key in text


def test_map_impossible_target_exits_2_without_output(tmp_path, capsys):
    src = tmp_path / "g.npz"
    _write(src, conv_like_graph(500, 2))
    out = tmp_path / "m.npz"
    rc = main(["map", str(src), "-o", str(out), "--mesh", "2x2", "--neurons-per-core", "100", "--no-progress"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "need at least 5 cores" in err and "4 usable" in err and "Traceback" not in err
    assert not out.exists()


def test_map_heatmap(tmp_path):
    src = tmp_path / "g.npz"
    _write(src, conv_like_graph(400, 2))
    png = tmp_path / "links.png"
    rc = main(["map", str(src), "-o", str(tmp_path / "m.npz"), "--mesh", "3x3", "--neurons-per-core", "60",
               "--preset", "fast", "--heatmap", str(png), "--no-progress"])
    assert rc == 0 and png.read_bytes()[:4] == b"\x89PNG"


def test_map_threads_option_gives_the_same_mapping(tmp_path):
    src = tmp_path / "g.npz"
    _write(src, conv_like_graph(1200, 3))
    outs = []
    for threads in ("1", "2"):
        out = tmp_path / f"m{threads}.npz"
        assert main(["map", str(src), "-o", str(out), "--mesh", "4x4", "--neurons-per-core", "90", "--preset", "fast",
                     "--threads", threads, "--no-progress"]) == 0
        outs.append(np.load(out)["core_xy"])
    np.testing.assert_array_equal(outs[0], outs[1])

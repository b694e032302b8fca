import numpy as np

from corefold.cli import main
from corefold.mapping.testing import conv_like_graph, random_graph


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


def test_map_bound_bounds_the_mapping_it_prints_beside(tmp_path, capsys):
    """``--bound``: the bound over every mapping that keeps the capacities is positive, at
    most the traffic of the mapping made (which keeps them), saved and printed. Each of the
    200 vertices has about 40 neighbours, more than its core's 25 neurons hold."""
    topo = random_graph(200, 40.0, 0)
    src = tmp_path / "g.npz"
    _write(src, topo)
    out = tmp_path / "m.npz"
    rc = main(["map", str(src), "-o", str(out), "--mesh", "3x3", "--neurons-per-core", "25",
               "--preset", "fast", "--no-progress", "--bound"])
    assert rc == 0
    z = np.load(out)
    assert 0 < z["any_mapping_bound"] <= z["traffic"]
    assert "any mapping >=" in capsys.readouterr().out
    rc = main(["map", str(src), "-o", str(tmp_path / "m2.npz"), "--mesh", "3x3", "--no-progress", "--bound",
               "--objective", "multicast"])
    assert rc == 2 and not (tmp_path / "m2.npz").exists()
    assert "--bound" in capsys.readouterr().err


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


def test_map_set_reaches_the_settings_and_help_lists_them(tmp_path, capsys):
    src = tmp_path / "g.npz"
    _write(src, conv_like_graph(600, 2))
    used = []
    for extra in ([], ["--set", "max_fill=0.5", "--set", "bisection_restarts=2"]):
        out = tmp_path / f"m{len(extra)}.npz"
        assert main(["map", str(src), "-o", str(out), "--mesh", "4x4", "--neurons-per-core", "100", "--preset",
                     "fast", "--no-progress", *extra]) == 0
        xy = np.load(out)["core_xy"]
        used.append(np.unique(xy, axis=0).shape[0])
    # 7 = ceil(600 / (100 * 0.97)) cores; at a fill of 0.5 the region has 12 (refinement may empty some)
    assert used[0] == 7 and used[1] > 7
    capsys.readouterr()
    try:
        main(["map", "--help-settings"])
    except SystemExit as exc:
        assert exc.code == 0
    text = capsys.readouterr().out
    for name in ("matching_limit", "matching_repeats", "min_shrink", "bisection_restarts", "force_fraction",
                 "force_iterations"):
        assert f"  {name} (" in text
    assert text.count("No effect under the default preset") >= 2


def test_map_bad_setting_is_one_line_and_writes_nothing(tmp_path, capsys):
    src = tmp_path / "g.npz"
    _write(src, conv_like_graph(300, 2))
    out = tmp_path / "m.npz"
    for bad in ("force_fraction=2", "no_such=1", "bisection_restarts=many"):
        rc = main(["map", str(src), "-o", str(out), "--mesh", "2x2", "--neurons-per-core", "100", "--set", bad,
                   "--no-progress"])
        err = capsys.readouterr().err
        assert rc == 2 and len(err.strip().splitlines()) == 1 and bad.split("=")[0] in err
        assert not out.exists()
    rc = main(["map", str(src), "-o", str(src), "--mesh", "2x2", "--neurons-per-core", "100", "--no-progress"])
    assert rc == 2 and "input" in capsys.readouterr().err


def test_map_archive_out_of_core_prints_each_phase(tmp_path, capsys, monkeypatch):
    """``corefold map`` on an archive, out of core with small chunks: every vertex on one
    core within both capacities, and one line per phase and per streamed level."""
    from corefold.mapping import out_of_core
    from corefold.mapping.topology.archive import write_archive

    monkeypatch.setattr(out_of_core, "CHUNK_BYTES", 2048)
    topo = conv_like_graph(2000, 3)
    topo.weights = np.asarray(topo.weights, np.int64)
    src = tmp_path / "g.zip"
    write_archive(topo, src)
    out = tmp_path / "m.npz"
    rc = main(["map", str(src), "-o", str(out), "--mesh", "4x4", "--neurons-per-core", "140",
               "--synapses-per-core", "2000", "--preset", "fast", "--seed", "1", "--no-progress",
               "--set", "out_of_core=always", "--set", "stream_coarsest_entries=3000"])
    assert rc == 0
    z = np.load(out)
    xy = z["core_xy"]
    assert xy.shape == (2000, 2) and xy.min() >= 0 and xy.max() <= 3
    core = xy[:, 1] * 4 + xy[:, 0]
    assert np.bincount(core).max() <= 140
    assert np.bincount(core, weights=topo.synapses).max() <= 2000
    assert z["violations"].tolist() == [0, 0]
    text = capsys.readouterr().out
    assert "out of core" in text
    for key in ("phases", "coarsen", "coarsest", "uncoarsen", "evaluate", "level 0:", "mapped in memory"):
        assert key in text, key

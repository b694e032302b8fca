import numpy as np
import pytest

from corefold.cli import main
from corefold.mapping.topology.edge_list import read_edge_list
from corefold.mapping.topology.generate import random_topology
from corefold.mapping.topology.io import convert_topology, load_topology, save_topology
from corefold.mapping.topology.model import TopologyError

FIELDS = ("indptr", "indices", "weights", "neuron_sizes", "synapses")


def _same(a, b, fields=FIELDS):
    for f in fields:
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f), err_msg=f)


def test_converters_round_trip_between_all_formats(tmp_path):
    t = random_topology(120, 600, 8, max_weight=50, max_neuron_size=4, isolated=0.2)
    save_topology(t, tmp_path / "a.npz")
    convert_topology(tmp_path / "a.npz", tmp_path / "b.zip")
    convert_topology(tmp_path / "b.zip", tmp_path / "c.npz")
    _same(t, load_topology(tmp_path / "c.npz"))
    _same(t, load_topology(tmp_path / "b.zip"))
    # edge lists keep the adjacency and weights (not sizes or fan-in)
    convert_topology(tmp_path / "b.zip", tmp_path / "d.edges")
    convert_topology(tmp_path / "d.edges", tmp_path / "e.zip")
    _same(t, load_topology(tmp_path / "e.zip"), ("indptr", "indices", "weights"))
    assert list(tmp_path.glob(".*")) == []  # no temporary files left


def test_float_weights_through_the_edge_list(tmp_path):
    t = random_topology(30, 100, 1)
    t.weights = t.weights.astype(np.float32) * np.float32(0.25)
    save_topology(t, tmp_path / "f.txt")
    u = load_topology(tmp_path / "f.txt")
    assert u.weights.dtype == np.float32
    _same(t, u, ("indptr", "indices", "weights"))


def test_edge_list_comments_blank_lines_and_header(tmp_path):
    p = tmp_path / "g.el"
    p.write_text("# a comment\n# vertices: 6\n\n0 1\n  # indented comment\n1 2 # trailing\n\n2 0\n")
    t = read_edge_list(p)
    assert t.num_vertices == 6 and t.num_edges == 3
    assert t.synapses.tolist() == [1, 1, 1, 0, 0, 0]
    p.write_text("0 1 0.5\n1 0 1.5\n")
    t = read_edge_list(p)
    assert t.weights.tolist() == [2.0, 2.0] and t.weights.dtype == np.float32  # fractional input: float


@pytest.mark.parametrize("text,match", [
    ("0 1 2\n\n# c\n1 2 x\n", "line 4: weight 'x' is not a number"),
    ("0 1 2\n1 2\n", "line 2: 2 fields, but the first edge line has 3"),
    ("0 1\n1 2 3 4\n", "line 2: expected 'src dst \\[weight\\]', got 4 fields"),
    ("0 1\n1.5 2\n", "line 2: vertex id '1.5' is not an integer"),
    ("0 1\n-1 2\n", "line 2: vertex id '-1' is negative"),
    ("0 1 -3\n", "line 1: weight '-3' must be finite"),
    ("# vertices: 2\n0 5\n", "header says 2 vertices"),
])
def test_edge_list_errors_name_the_line(tmp_path, text, match):
    p = tmp_path / "bad.txt"
    p.write_text(text)
    with pytest.raises(TopologyError, match=match):
        read_edge_list(p)


def test_npz_missing_array_and_unknown_extension(tmp_path):
    np.savez(tmp_path / "x.npz", indptr=np.zeros(1, np.int64))
    with pytest.raises(TopologyError, match="lacks array\\(s\\) indices, weights"):
        load_topology(tmp_path / "x.npz")
    with pytest.raises(TopologyError, match="unknown topology extension '.csv'"):
        load_topology(tmp_path / "x.csv")


def test_cli_generate_convert_info(tmp_path, capsys):
    out = tmp_path / "sw.zip"
    assert main(["topology", "generate", "small-world", "--n", "500", "--k", "6", "--seed", "3", "-o", str(out)]) == 0
    assert main(["topology", "convert", str(out), str(tmp_path / "sw.npz")]) == 0
    capsys.readouterr()
    assert main(["topology", "info", str(out)]) == 0
    text = capsys.readouterr().out
    assert "vertices        500" in text and "total weight    3000" in text and "synapses        3000" in text
    assert main(["topology", "info", str(tmp_path / "sw.npz")]) == 0
    assert "degree          min" in capsys.readouterr().out
    assert main(["topology", "generate", "lenet", "-o", str(tmp_path / "l.npz")]) == 0
    assert load_topology(tmp_path / "l.npz").num_vertices == 8878


def test_cli_errors_are_one_line(tmp_path, capsys):
    (tmp_path / "bad.txt").write_text("0 1\nx 2\n")
    assert main(["topology", "info", str(tmp_path / "bad.txt")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "line 2" in err
    assert main(["topology", "convert", str(tmp_path / "bad.txt"), str(tmp_path / "o.zip")]) == 2
    assert not (tmp_path / "o.zip").exists()


def test_vectorised_integer_formatting_matches_python():
    from corefold.mapping.topology.edge_list import format_int_rows

    rng = np.random.default_rng(0)
    cols = [rng.integers(0, 10**k, 500) for k in (1, 6, 18)]
    cols[0][:3] = [0, 9, 10]
    expected = "".join(f"{a} {b} {c}\n" for a, b, c in zip(*cols, strict=True))
    assert format_int_rows(cols).decode() == expected


def test_cli_names_a_truncated_archive_in_one_line(tmp_path, capsys):
    t = random_topology(50, 300, 2)
    save_topology(t, tmp_path / "ok.zip")
    data = (tmp_path / "ok.zip").read_bytes()
    (tmp_path / "cut.zip").write_bytes(data[: len(data) * 2 // 3])
    capsys.readouterr()
    assert main(["topology", "info", str(tmp_path / "cut.zip")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cut.zip" in err and "Traceback" not in err


def test_failed_save_leaves_no_file(tmp_path):
    t = random_topology(20, 60, 1)
    t.weights = t.weights.astype(np.float32)
    t.weights[0] = np.nan
    with pytest.raises(TopologyError, match="finite"):
        save_topology(t, tmp_path / "x.zip")
    assert list(tmp_path.iterdir()) == []

"""``corefold compile`` and ``corefold sim build/`` end to end on a seeded multi-exit CNN
(BranchyNet-style: an exit after every second stage) that needs two executables on a
1x2 mesh of 64 KiB cores. Numerics: the simulated chain and the build's ONNX subgraphs
run one after another in ONNX Runtime both match the whole model in ONNX Runtime within
1e-5 of each output's scale (the split convolutions add in another order)."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from corefold.backend.testing import npu_text

TOLERANCE = 1e-5


def branchy(path: Path, seed: int = 0, ch: int = 32, stages: int = 4, hw: int = 8) -> None:
    """Conv-ReLU stages of ``ch`` channels; after every second one an exit (global pool,
    classifier) that is a graph output, as at a multi-exit network's branch points."""
    rng = np.random.default_rng(seed)
    nodes, inits, outs = [], [], []
    x, cin = "x", 3
    for s in range(stages):
        w = (rng.standard_normal((ch, cin, 3, 3)) / np.sqrt(cin * 9)).astype(np.float32)
        b = (rng.standard_normal(ch) * 0.1).astype(np.float32)
        inits += [nh.from_array(w, f"w{s}"), nh.from_array(b, f"b{s}")]
        nodes += [h.make_node("Conv", [x, f"w{s}", f"b{s}"], [f"c{s}"], pads=[1, 1, 1, 1], name=f"conv{s}"),
                  h.make_node("Relu", [f"c{s}"], [f"r{s}"], name=f"relu{s}")]
        x, cin = f"r{s}", ch
        if s % 2 == 1:
            fw = (rng.standard_normal((10, ch)) / np.sqrt(ch)).astype(np.float32)
            inits.append(nh.from_array(fw, f"fw{s}"))
            nodes += [h.make_node("GlobalAveragePool", [x], [f"g{s}"], name=f"gap{s}"),
                      h.make_node("Flatten", [f"g{s}"], [f"f{s}"], name=f"flat{s}"),
                      h.make_node("Gemm", [f"f{s}", f"fw{s}"], [f"exit{s}"], transB=1, name=f"fc{s}")]
            outs.append(h.make_tensor_value_info(f"exit{s}", T.FLOAT, [1, 10]))
    g = h.make_graph(nodes, "branchy", [h.make_tensor_value_info("x", T.FLOAT, [1, 3, hw, hw])], outs, inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    onnx.checker.check_model(m)
    onnx.save(m, path)


def target_toml(width: int, height: int, sram_kib: float) -> str:
    """The npu core on a ``width`` x ``height`` mesh with ``sram_kib`` of SRAM."""
    text = npu_text()
    for old, new in [("width = 8 ", f"width = {width} "), ("height = 8 ", f"height = {height} "),
                     ("sram_kib = 1024", f"sram_kib = {sram_kib}"), ("sram_reserved_kib = 64", "sram_reserved_kib = 4"),
                     ("dram_attach = [[0, 3], [0, 4], [7, 3], [7, 4]]", "dram_attach = [[0, 0]]")]:
        assert old in text, old
        text = text.replace(old, new, 1)
    return text.replace('name = "corefold-npu"', f'name = "test-{width}x{height}-{sram_kib}k"', 1)


def corefold(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "corefold", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=900)


def assert_one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    d = tmp_path_factory.mktemp("compile")
    branchy(d / "branchy.onnx")
    (d / "small.toml").write_text(target_toml(1, 2, 64))
    proc = corefold("compile", d / "branchy.onnx", "--target", d / "small.toml", "-o", d / "build", "--quiet")
    assert proc.returncode == 0, proc.stderr
    return d, proc


def ort_run(path: Path, feeds: dict) -> dict:
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, {i.name: feeds[i.name] for i in sess.get_inputs()}), strict=True))


def assert_close(want: dict, got: dict) -> None:
    for k, w in want.items():
        scale = float(np.abs(w).max()) or 1.0
        np.testing.assert_allclose(got[k], w, rtol=0, atol=TOLERANCE * scale, err_msg=k)


def test_manifest_lists_a_chain_that_keeps_every_exit(work):
    d, proc = work
    build = d / "build"
    doc = json.loads((build / "manifest.json").read_text())
    exes = doc["executables"]
    assert len(exes) >= 2, "the 64 KiB cores cannot hold all four convolutions' weights"
    assert doc["fusion"] == "optimal"
    assert len(exes) == doc["minimum_executables"]
    assert doc["minimum_executables"] <= len(exes) <= doc["compile_calls"]
    assert doc["chain_minimum_executables"] is None  # the default strategy has no split phase
    # candidates compile with list-scheduling orders; the kept ones are lowered again with M3's
    assert 1 <= doc["polished"] <= len(exes)
    assert sorted(p.name for p in build.glob("*.cfx")) == sorted(e["cfx"] for e in exes)
    # every exit is stored for the host; what crosses between executables stays in DRAM
    for name in ("exit1", "exit3"):
        assert doc["buffers"][name]["location"] == "host"
    crossing = [n for n, b in doc["buffers"].items() if b["producer"] is not None and b["consumers"]]
    assert crossing and all(doc["buffers"][n]["location"] == "dram" for n in crossing)
    for n in crossing:
        b = doc["buffers"][n]
        assert all(c > b["producer"] for c in b["consumers"]), (n, b)
    # the table: every strategy, none below the optimal reference
    rows = {r["strategy"]: r for r in doc["strategies"]}
    assert set(rows) == {"a", "b", "c", "d", "optimal"}
    assert all(r["executables"] >= doc["minimum_executables"] for r in rows.values())
    assert rows["optimal"]["executables"] == doc["minimum_executables"]
    assert f"{len(exes)} executable(s)" in proc.stdout


def test_build_subgraphs_chained_in_onnx_runtime_equal_the_model(work):
    d, _ = work
    build = d / "build"
    doc = json.loads((build / "manifest.json").read_text())
    feeds = {"x": np.random.default_rng(3).standard_normal((1, 3, 8, 8)).astype(np.float32)}
    pool = dict(feeds)
    for e in doc["executables"]:
        pool.update(ort_run(build / e["onnx"], pool))
    assert_close(ort_run(d / "branchy.onnx", feeds), {k: pool[k] for k in doc["outputs"]})


def test_sim_build_checks_against_onnx_runtime(work):
    d, _ = work
    build = d / "build"
    feeds = {"x": np.random.default_rng(5).standard_normal((1, 3, 8, 8)).astype(np.float32)}
    np.savez(d / "in.npz", **feeds)
    proc = corefold("sim", build, "--inputs", d / "in.npz", "-o", d / "out.npz", "--report", d / "r.json",
                    "--trace", d / "t.json", "--check", d / "branchy.onnx", "--profile", d / "ops.csv")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = dict(np.load(d / "out.npz"))
    assert sorted(out) == ["exit1", "exit3"]
    assert_close(ort_run(d / "branchy.onnx", feeds), out)
    rep = json.loads((d / "r.json").read_text())
    n = len(json.loads((build / "manifest.json").read_text())["executables"])
    assert len(rep["executables"]) == n
    assert rep["latency_s"] == pytest.approx(sum(e["latency_s"] for e in rep["executables"]))
    assert rep["host_bytes"] == sum(e["host_bytes"] for e in rep["executables"]) > 0
    # each executable's critical path: printed, and its steps add up to that executable's latency
    assert proc.stdout.count("    critical path ") == n
    for e in rep["executables"]:
        cp = e["critical_path"]
        assert cp["steps"] > 0
        assert sum(cp["service_s"].values()) + sum(cp["wait_s"].values()) == pytest.approx(e["latency_s"], rel=1e-9)
    trace = json.loads((d / "t.json").read_text())["traceEvents"]
    names = {e["args"]["name"].split(":")[0] for e in trace if e.get("name") == "process_name"}
    assert names == {f"part{i}" for i in range(n)}
    # the profile: one row per operator of each executable, named by its executable, its
    # critical-path times adding up to that executable's compute on the path
    with open(d / "ops.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert {r["executable"] for r in rows} == names
    for i, e in enumerate(rep["executables"]):
        mine = [r for r in rows if r["executable"] == f"part{i}"]
        compute = e["critical_path"]["service_s"].get("compute", 0) + e["critical_path"]["wait_s"].get("compute", 0)
        assert sum(float(r["critical_us"]) for r in mine) == pytest.approx(compute * 1e6, abs=1e-3 * len(mine))


def test_sim_build_refuses_a_changed_executable(work, tmp_path):
    d, _ = work
    build = tmp_path / "build"
    shutil.copytree(d / "build", build)
    cfx = build / "part0.cfx"
    data = bytearray(cfx.read_bytes())
    data[len(data) // 2] ^= 0xFF
    cfx.write_bytes(bytes(data))
    assert_one_line_error(corefold("sim", build), "part0.cfx", "checksum")


def test_recompiling_replaces_a_build(work, tmp_path):
    d, _ = work
    build = tmp_path / "b"
    shutil.copytree(d / "build", build)
    (build / "stale.txt").write_text("old")
    proc = corefold("compile", d / "branchy.onnx", "--target", d / "small.toml", "-o", build, "--quiet",
                    "--no-table", "--fusion", "c", "--no-polish")
    assert proc.returncode == 0, proc.stderr
    assert not (build / "stale.txt").exists()
    doc = json.loads((build / "manifest.json").read_text())
    assert (doc["fusion"], doc["polished"]) == ("c", 0)
    # the candidates' own executables (no M3 order search) run correctly too
    check = corefold("sim", build, "--check", d / "branchy.onnx")
    assert check.returncode == 0, check.stdout + check.stderr
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "temporary folders left behind"


def test_bad_outputs_and_targets_are_one_line_errors(work, tmp_path):
    d, _ = work
    model = d / "branchy.onnx"
    afile = tmp_path / "a.txt"
    afile.write_text("keep")
    assert_one_line_error(corefold("compile", model, "--target", d / "small.toml", "-o", afile), "-o", "not a folder")
    assert afile.read_text() == "keep"
    assert_one_line_error(corefold("compile", model, "--target", d / "small.toml", "-o", d), "-o", "input")
    other = tmp_path / "photos"
    other.mkdir()
    (other / "cat.jpg").write_text("meow")
    assert_one_line_error(corefold("compile", model, "--target", d / "small.toml", "-o", other), "not a corefold build")
    assert (other / "cat.jpg").read_text() == "meow"
    # an instruction memory too small for any single operator: the backend's one line
    (tmp_path / "tiny.toml").write_text(target_toml(1, 2, 64).replace("instruction_kib = 256", "instruction_kib = 0.25"))
    proc = corefold("compile", model, "--target", tmp_path / "tiny.toml", "-o", tmp_path / "never", "--quiet")
    assert_one_line_error(proc, "instruction memory of core", "conv0", "alone")
    assert not (tmp_path / "never").exists()


VENDORC = textwrap.dedent("""\
    import sys
    import onnx
    model, out, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])
    n = sum(node.op_type not in ("Constant", "ConstantOfShape") for node in onnx.load(model).graph.node)
    if n > limit:
        sys.exit(f"vendorc: {n} operators do not fit (at most {limit})")
    open(out, "wb").write(b"EXE" + bytes([n]))
""")


def test_a_users_compiler_builds_the_chain(work, tmp_path):
    d, _ = work
    script = tmp_path / "vendorc.py"
    script.write_text(VENDORC)
    proc = corefold("compile", d / "branchy.onnx", "-o", tmp_path / "b", "--quiet",
                    "--compiler-cmd", f"{sys.executable} {script} {{onnx}} {{out}} 5")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "b" / "manifest.json").read_text())
    sizes = [e["operators"] for e in doc["executables"]]
    assert sum(sizes) == 14 and max(sizes) <= 5 and len(sizes) >= doc["minimum_executables"] == 3
    for e in doc["executables"]:
        assert (tmp_path / "b" / e["cfx"]).read_bytes() == b"EXE" + bytes([e["operators"]])


def test_report_loads_in_a_headless_browser_without_console_errors(work):
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        pytest.skip("no chromium on this machine: the report was not opened in a browser")
    d, _ = work
    page = (d / "build" / "report.html").resolve()
    proc = subprocess.run([browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
                           "--v=0", f"--user-data-dir={d / 'chromium-profile'}", "--dump-dom", page.as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "<svg" in proc.stdout and "Fusion strategies" in proc.stdout
    console = [ln for ln in proc.stderr.splitlines() if "CONSOLE" in ln and ("rror" in ln or "Uncaught" in ln)]
    assert console == []


def test_the_readmes_main_job_compiles_and_simulates_the_bundled_example(tmp_path):
    """The README's first command after the install: the bundled example onto the default
    target (one executable: the path of every model that fits the chip), then ``corefold
    sim build --check``; both exit 0 and the build holds its report and manifest."""
    example = Path(__file__).resolve().parents[1] / "corefold" / "examples" / "tiny_cnn.onnx"
    proc = corefold("compile", example, "-o", tmp_path / "build", "--quiet")
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((tmp_path / "build" / "manifest.json").read_text())
    assert len(manifest["executables"]) == 1 and (tmp_path / "build" / "report.html").stat().st_size > 0
    proc = corefold("sim", tmp_path / "build", "--check", tmp_path / "build" / "model.onnx")
    assert proc.returncode == 0, proc.stderr
    assert ": ok" in proc.stdout

"""The build folder ``corefold compile -o build/`` writes and ``corefold sim build/`` reads.

It holds one ``.cfx`` per executable (docs/executable.md), each subgraph's ONNX, the whole
compiled model as ``model.onnx`` (quantized and split as compiled: the reference of
``corefold sim build/ --check build/model.onnx``), the target as ``target.toml``, a
``manifest.json`` (:func:`manifest`: run order, I/O bindings, buffers, checksums, compile
calls, the optimal reference) and ``report.html`` (:func:`render_report`).
:func:`write_build` writes it beside its final place and renames it into it, so a failed
write leaves no half-written build; :func:`load_build` refuses a file whose checksum
differs from the manifest's. The :class:`~corefold.compile.Build` comes from
:func:`~corefold.compile.compile_model`. Cost: O(bytes written or read).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from corefold.compile import Build, link
from corefold.errors import DataError
from corefold.target import Target

MANIFEST_VERSION = 1


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def io_bytes(exe) -> tuple[int, int]:
    """(DRAM bytes, host bytes) an executable reads and writes at its boundary. O(I/O)."""
    dram = host = 0
    for io in list(exe.inputs) + list(exe.outputs):
        n = int(np.prod(io.shape, dtype=np.int64)) * np.dtype(io.dtype).itemsize
        if io.location == "host":
            host += n
        else:
            dram += n
    return dram, host


def manifest(build: Build, names: list[str]) -> dict[str, Any]:
    """The build's manifest (before checksums): run order, I/O bindings, buffers, M1's
    figures."""
    producers: dict[str, int] = {}
    for i, exe in enumerate(build.executables):
        for io in getattr(exe, "outputs", []):
            producers[io.name] = i
    buffers: dict[str, dict[str, Any]] = {}
    exes = []
    for i, (exe, sub, name) in enumerate(zip(build.executables, build.subgraphs, names, strict=True)):
        entry: dict[str, Any] = {"name": name, "cfx": f"{name}.cfx", "onnx": f"{name}.onnx", "operators": len(sub),
                                 "inputs": [v.name for v in sub.inputs], "outputs": [v.name for v in sub.outputs]}
        if hasattr(exe, "inputs"):
            for io in list(exe.inputs) + list(exe.outputs):
                b = buffers.setdefault(io.name, {"shape": list(io.shape), "dtype": io.dtype, "location": io.location,
                                                 "bytes": int(np.prod(io.shape, dtype=np.int64)) *
                                                 np.dtype(io.dtype).itemsize,
                                                 "producer": producers.get(io.name), "consumers": []})
                if io in exe.inputs:
                    b["consumers"].append(i)
                if io.location == "host":
                    b["location"] = "host"
            entry["cores"] = len(exe.programs)
        exes.append(entry)
    res = build.serial
    doc: dict[str, Any] = {
        "version": MANIFEST_VERSION, "model": build.graph.name, "target": build.target.name,
        "executables": exes, "fusion": res.strategy, "compile_calls": res.compile_calls,
        "fits_calls": res.fits_calls, "minimum_executables": res.minimum_executables,
        "chain_minimum_executables": res.chain_minimum_executables, "polished": build.polished,
        "ends_inside_integer_patterns": res.ends_inside_patterns(),
        "balance": res.balance.to_json() if res.balance is not None else None,
        "inputs": [v.name for v in build.graph.inputs], "outputs": [v.name for v in build.graph.outputs],
        "buffers": buffers,
    }
    if build.table:
        doc["strategies"] = strategy_rows(build)
    if build.simulation is not None:
        doc["latency_s"] = build.simulation.report.latency_s
    return doc


def strategy_rows(build: Build) -> list[dict[str, Any]]:
    rows = []
    for name, r in build.table.items():
        dram = host = 0
        for exe in link(list(r.outcomes), build.graph) if r.outcomes and hasattr(r.outcomes[0], "inputs") else []:
            d, h = io_bytes(exe)
            dram, host = dram + d, host + h
        rows.append({"strategy": name, "executables": len(r.pieces), "compile_calls": r.compile_calls,
                     "minimum_executables": r.minimum_executables,
                     "chain_minimum_executables": r.chain_minimum_executables, "dram_bytes": dram, "host_bytes": host,
                     "latency_s": build.latency_by_strategy.get(name)})
    return rows


def write_build(build: Build, out: str | os.PathLike, *, progress: bool = False,
                target_toml: str | None = None) -> Path:
    """Write the build folder (atomically: a temporary folder beside it, renamed into
    place; a previous build there is replaced only once the new one is complete).
    ``target_toml``, the target's TOML text, is kept as ``target.toml`` so that the build
    runs without naming its target again.

    Raises:
        OutputPathError: the folder cannot be written.
    """
    from corefold.frontend.onnx import save_model

    final = Path(out)
    parent = final.parent if str(final.parent) else Path(".")
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=parent))
    try:
        names = [f"part{i}" for i in range(len(build.executables))]
        for exe, sub, name in zip(build.executables, build.subgraphs, names, strict=True):
            save_model(sub, tmp / f"{name}.onnx")
            if hasattr(exe, "programs"):
                from corefold.backend.cfx import save

                save(exe, tmp / f"{name}.cfx")
            else:  # a user's compiler: its own output bytes
                (tmp / f"{name}.cfx").write_bytes(getattr(exe, "data", b""))
        save_model(build.graph, tmp / "model.onnx")  # the whole compiled model: corefold sim --check's reference
        doc = manifest(build, names)
        doc["model_onnx"] = "model.onnx"
        if target_toml is not None:
            (tmp / "target.toml").write_text(target_toml)
            doc["target_toml"] = "target.toml"
        for e in doc["executables"]:
            e["sha256"] = {k: _sha256(tmp / e[k]) for k in ("cfx", "onnx")}
        (tmp / "manifest.json").write_text(json.dumps(doc, indent=1, default=float))
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes 0700; a build folder is an ordinary one
        (tmp / "report.html").write_text(render_report(build, doc))
        if build.simulation is not None:
            (tmp / "report.json").write_text(json.dumps(build.simulation.report_json(), indent=1, default=float))
        old = None
        if final.exists():
            old = parent / f".{final.name}.old.{os.getpid()}"
            os.replace(final, old)
        os.replace(tmp, final)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def render_report(build: Build, doc: dict[str, Any]) -> str:
    from corefold.cost.model import graph_cost
    from corefold.report import render

    chain = []
    runs = build.simulation.runs if build.simulation is not None else []
    for i, (sub, e) in enumerate(zip(build.subgraphs, doc["executables"], strict=True)):
        gc = graph_cost(sub, build.target)
        chain.append({"name": e["name"], "ops": len(sub), "macs": gc.macs, "weight_bytes": gc.parameter_bytes,
                      "bytes_out": build.serial.crossing_bytes[i] if i < len(build.serial.crossing_bytes) else 0,
                      "latency_s": runs[i].report.latency_s if i < len(runs) else None})
    sim = runs[0].report.to_json() if runs else None
    events = []
    if runs:
        from corefold.sim.trace import trace_events

        events = trace_events(runs[0].timed.engine, runs[0].timed.timeline)["traceEvents"]
    notes = [f"M1 fusion '{doc['fusion']}': {len(chain)} executables, {doc['compile_calls']} compile calls; "
             f"the optimal reference needs {doc['minimum_executables']} cutting anywhere, "
             f"{doc.get('chain_minimum_executables')} fusing the split chain's pieces."]
    if doc.get("balance") and doc["balance"]["latency_before_s"]:
        notes.append(balance_line(doc["balance"]))
    return render(title=f"corefold build of {build.graph.name}", target=build.target.name, chain=chain,
                  fusion=doc.get("strategies", []), sim=sim, events=events, quant=build.quantize_report, notes=notes)


def balance_line(b: dict) -> str:
    """One line on M1's balanced cuts (manifest ``balance``)."""
    before, after = b["latency_before_s"], b["latency_after_s"]
    return (f"cuts moved for latency: {b['moved']} ({b['evaluations']} positions tried, "
            f"{b['compiles']} compiles of the calls above), "
            f"{before * 1e6:.4g} -> {after * 1e6:.4g} us ({after / before - 1:+.1%}) before the order search")


def load_build(folder: str | os.PathLike, target: Target | None = None):
    """The executables of a build folder, in run order, its manifest and its target
    (``target``, else the build's ``target.toml``, else None: the bundled preset whose
    fingerprint matches).

    Raises:
        DataError: no manifest, or a file whose checksum differs from the manifest's.
        CfxError: a corrupt executable (from ``backend.cfx.load``).
    """
    from corefold.backend.cfx import load
    from corefold.target import parse_target

    folder = Path(folder)
    mpath = folder / "manifest.json"
    if not mpath.is_file():
        raise DataError(f"'{folder}': no manifest.json (not a corefold build folder)")
    try:
        doc = json.loads(mpath.read_text())
        entries = doc["executables"]
    except (ValueError, KeyError, TypeError):
        raise DataError(f"'{mpath}': not a corefold manifest") from None
    if target is None and doc.get("target_toml") and (folder / doc["target_toml"]).is_file():
        target = parse_target((folder / doc["target_toml"]).read_text(), f"'{folder / doc['target_toml']}'")
    exes = []
    for e in entries:
        path = folder / e["cfx"]
        if not path.is_file():
            raise DataError(f"'{folder}': the manifest lists '{e['cfx']}', which is missing")
        want = e.get("sha256", {}).get("cfx")
        if want and _sha256(path) != want:
            raise DataError(f"'{path}': its checksum differs from the manifest's (changed or corrupt)")
        exes.append(load(path, target))
    return exes, doc, target


__all__ = ["Build", "MANIFEST_VERSION", "manifest", "write_build", "load_build", "render_report",
           "strategy_rows", "balance_line"]

"""The trace writer: schema-valid Chrome trace-event JSON, one track per resource server."""

import json

import numpy as np
import pytest

from corefold.sim.engine import Engine, Stage
from corefold.sim.trace import schema, write_trace

jsonschema = pytest.importorskip("jsonschema")


def _small_run():
    e = Engine()
    mat = e.resource("core(0,0).matrix", process="core (0,0)", thread="matrix", kind="matrix")
    vec = e.resource("core(0,0).vector", 2, process="core (0,0)", thread="vector", kind="vector")
    east = e.resource("link(0,0)E", process="NoC", thread="(0,0) E", kind="link")
    a = e.task([Stage(mat, 2e-6)], name="conv", category="compute", args={"op": "Conv"})
    b = e.task([Stage(vec, 1e-6)], deps=[a], name="relu", category="compute")
    c = e.task([Stage(vec, 1e-6)], deps=[a], name="relu2", category="compute")
    e.task([Stage(east, 3e-6, 1e-9)], deps=[b, c], name="send", category="noc", args={"bytes": 96})
    return e, e.run()


def test_trace_matches_the_schema_and_has_one_track_per_server(tmp_path):
    e, tl = _small_run()
    path = tmp_path / "t.json"
    counters = [("core (0,0)", "SRAM (0,0)", np.array([0.0, 1e-6, 4e-6]), np.array([0, 4096, 0]))]
    write_trace(path, e, tl, counters)
    doc = json.loads(path.read_text())
    jsonschema.validate(doc, schema())
    events = doc["traceEvents"]
    names = {(ev["pid"], ev["tid"]): ev["args"]["name"] for ev in events if ev["name"] == "thread_name"}
    assert sorted(names.values()) == ["(0,0) E", "matrix", "vector 0", "vector 1"]
    procs = {ev["args"]["name"] for ev in events if ev["name"] == "process_name"}
    assert procs == {"core (0,0)", "NoC"}
    spans = [ev for ev in events if ev["ph"] == "X"]
    assert len(spans) == len(tl.stage_task) == 4
    # the two relus ran in parallel on two tracks; the send after both, 3 us long
    relus = [ev for ev in spans if ev["name"].startswith("relu")]
    assert relus[0]["ts"] == relus[1]["ts"] == pytest.approx(2.0)
    assert relus[0]["tid"] != relus[1]["tid"]
    send = next(ev for ev in spans if ev["name"] == "send")
    assert send["ts"] == pytest.approx(3.0) and send["dur"] == pytest.approx(3.0)
    assert send["args"] == {"bytes": 96}
    assert [ev["args"]["bytes"] for ev in events if ev["ph"] == "C"] == [0, 4096, 0]
    # no two spans overlap on one track
    by_track = {}
    for ev in spans:
        by_track.setdefault((ev["pid"], ev["tid"]), []).append((ev["ts"], ev["ts"] + ev["dur"]))
    for iv in by_track.values():
        iv.sort()
        assert all(b[0] >= a[1] - 1e-9 for a, b in zip(iv, iv[1:], strict=False))


def test_the_schema_refuses_what_perfetto_would_not_read():
    e, tl = _small_run()
    from corefold.sim.trace import trace_events

    doc = trace_events(e, tl)
    jsonschema.validate(doc, schema())
    bad = json.loads(json.dumps(doc))
    span = next(ev for ev in bad["traceEvents"] if ev["ph"] == "X")
    span["dur"] = -1.0
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema())
    bad = json.loads(json.dumps(doc))
    del next(ev for ev in bad["traceEvents"] if ev["ph"] == "X")["ts"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema())

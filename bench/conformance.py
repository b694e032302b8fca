"""ONNX's node conformance cases: corefold's pass count beside ONNX Runtime's.

Every case of the installed onnx's node test suite (generated once and cached under
``build/node_cases/``, as ``tests/test_node_conformance.py`` does) is run twice in this
one process: by corefold exactly as the test runs it (parameter inputs bound as values,
import, verify, ``corefold.executor.run``) and by ONNX Runtime's CPU provider on the
original model with all inputs fed. Both are compared with the expected outputs by the same
rule (ONNX's backend rule: shapes, dtypes, rtol/atol of the case, NaN equal).

Printed: the two pass counts; corefold's outcomes (pass, refused with a CorefoldError,
wrong answer, crash) and ONNX Runtime's; the expected failures of the test file by reason;
and every case ONNX Runtime passes that corefold does not, with its expected-failure
reason if it has one. A crash or a wrong answer outside the test file's list is a bug.

Usage::

    python bench/conformance.py [--filter SUBSTRING] [--json out.json] [--list]
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import json
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _load_test_module():
    """tests/test_node_conformance.py, for its runner and its expected-failure lists."""
    spec = importlib.util.spec_from_file_location("node_conformance", ROOT / "tests" / "test_node_conformance.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--filter", default="", help="only cases whose name contains this")
    p.add_argument("--json", default=None, help="also write every case's outcomes to this JSON file")
    p.add_argument("--list", action="store_true", help="list every case that fails on either side")
    args = p.parse_args(argv)

    import numpy as np

    from corefold.errors import CorefoldError
    from corefold.frontend.onnx.node_cases import compare_outputs, run_ort

    warnings.simplefilter("ignore")
    t0 = time.perf_counter()
    tests = _load_test_module()
    load_s = time.perf_counter() - t0
    expected = tests.expected_failures()
    cases = [c for c in tests.CASES.values() if args.filter in c.name]
    ours: dict[str, tuple[str, str]] = {}
    theirs: dict[str, tuple[str, str]] = {}
    time_ours = time_ort = 0.0
    for case in cases:
        t = time.perf_counter()
        try:
            problem = tests.check_case(case)
            ours[case.name] = ("pass", "") if problem is None else ("wrong", problem)
        except CorefoldError as exc:
            ours[case.name] = ("refused", str(exc))
        except Exception as exc:  # noqa: BLE001 - a crash is what this bench looks for
            ours[case.name] = ("crash", f"{type(exc).__name__}: {exc}")
        time_ours += time.perf_counter() - t
        t = time.perf_counter()
        try:
            with np.errstate(all="ignore"):
                problem = None
                for i, (_, want) in enumerate(case.data_sets):
                    problem = problem or compare_outputs(want, run_ort(case, i), case.rtol, case.atol)
            theirs[case.name] = ("pass", "") if problem is None else ("wrong", problem)
        except Exception as exc:  # noqa: BLE001 - ONNX Runtime refusing a model
            theirs[case.name] = ("fail", (str(exc).splitlines() or [type(exc).__name__])[0])
        time_ort += time.perf_counter() - t

    n = len(cases)
    ours_pass = sum(1 for s, _ in ours.values() if s == "pass")
    ort_pass = sum(1 for s, _ in theirs.values() if s == "pass")
    print(f"ONNX node conformance cases (onnx generators, {n} cases; cache load {load_s:.1f} s)")
    print(f"{'':24}{'corefold':>10}{'ONNX Runtime':>14}")
    print(f"{'passed':24}{ours_pass:>10}{ort_pass:>14}")
    print(f"{'time (s)':24}{time_ours:>10.1f}{time_ort:>14.1f}")
    print("corefold outcomes:     ", dict(collections.Counter(s for s, _ in ours.values())))
    print("ONNX Runtime outcomes: ", dict(collections.Counter(s for s, _ in theirs.values())))
    both = sum(1 for k in ours if ours[k][0] == "pass" and theirs[k][0] == "pass")
    print(f"passed by both: {both}; by corefold only: {ours_pass - both}; by ONNX Runtime only: {ort_pass - both}")

    by_reason = collections.Counter(expected[k] for k in ours if k in expected)
    print(f"\nexpected failures (tests/test_node_conformance.py): {sum(by_reason.values())}")
    for reason, count in by_reason.most_common():
        print(f"  {count:4d}  {reason[:110]}")

    unlisted = sorted(k for k in ours if ours[k][0] != "pass" and k not in expected)
    listed_but_pass = sorted(k for k in ours if ours[k][0] == "pass" and k in expected)
    bad = sorted(k for k in ours if ours[k][0] in ("crash", "wrong") and k not in expected)
    ort_only = sorted(k for k in ours if theirs[k][0] == "pass" and ours[k][0] != "pass")
    print(f"\nONNX Runtime passes, corefold does not: {len(ort_only)} "
          f"({sum(1 for k in ort_only if k in expected)} of them listed as expected failures)")
    for k in ort_only:
        if k not in expected or args.list:
            print(f"  {k}: {ours[k][0]}: {ours[k][1][:150]}" + (f"  [expected: {expected[k][:60]}]" if k in expected else ""))
    print(f"failures not in the test file's list: {len(unlisted)} (crashes or wrong answers among them: {len(bad)})")
    for k in unlisted:
        print(f"  {k}: {ours[k][0]}: {ours[k][1][:150]}")
    if listed_but_pass:
        print(f"listed as expected failures but passing: {listed_but_pass}")
    if args.list:
        print("\nONNX Runtime failures:")
        for k in sorted(theirs):
            if theirs[k][0] != "pass":
                print(f"  {k}: {theirs[k][0]}: {theirs[k][1][:150]}")
    if args.json:
        Path(args.json).write_text(json.dumps({k: {"corefold": ours[k], "onnxruntime": theirs[k],
                                                   "expected_failure": expected.get(k)} for k in sorted(ours)},
                                              indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

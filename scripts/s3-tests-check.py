#!/usr/bin/env python3
"""Judges one ceph/s3-tests run of scripts/s3-tests.sh against the committed lists.

    s3-tests-check.py core NAME RESULTS_DIR EXPECTED KNOWN
    s3-tests-check.py features NAME RESULTS_DIR FEATURES
    s3-tests-check.py rerun-list RESULTS_DIR/RUN LIST...   (prints the listed tests that failed)

A run is RESULTS_DIR/NAME (core) or RESULTS_DIR/NAME-features, each with status.tsv and
junit.xml. A listed test that failed is run once more, alone, by s3-tests.sh
(RESULTS_DIR/<run>-rerun); one that then passes is reported as FLAKY with its first failure's
message, not as a regression, so one timing accident on a loaded machine does not fail CI while a
test that fails twice does. Every failure is printed with its message, so CI's output says why.
"""
import os
import sys
import xml.etree.ElementTree as ET

# More failures than this in one run is not a flake: no rerun, every one is a regression.
RERUN_MAX = 8


def listed(path):
    """`module::test [reason]` per line; `#` starts a comment line."""
    out = {}
    for line in open(path):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        test, _, reason = line.partition(" ")
        out[test] = reason.strip()
    return out


def statuses(run_dir):
    """status.tsv names tests as s3tests.functional.test_s3::test_x; the lists as test_s3::test_x."""
    out = {}
    path = os.path.join(run_dir, "status.tsv")
    if not os.path.exists(path):
        return out
    for line in open(path):
        st, _, test = line.strip().partition("\t")
        if test:
            out[test.rsplit(".", 1)[-1]] = st
    return out


def messages(run_dir):
    """The first line of each failed or erroring test's message, from junit.xml."""
    out = {}
    try:
        root = ET.parse(os.path.join(run_dir, "junit.xml")).getroot()
    except (OSError, ET.ParseError):
        return out
    for case in root.iter("testcase"):
        for tag in ("failure", "error"):
            el = case.find(tag)
            if el is None:
                continue
            module = case.get("classname", "").rsplit(".", 1)[-1]
            text = (el.get("message") or el.text or "").strip().splitlines()
            out[f"{module}::{case.get('name')}"] = (text[0] if text else tag)[:300]
    return out


def failed_listed(run_dir, wanted):
    st = statuses(run_dir)
    return sorted(t for t in wanted if st.get(t) in ("FAILED", "ERROR"))


def judge(name, run_dir, wanted):
    """Returns (regressions, flaky, missing) of the tests in `wanted` for the run in run_dir."""
    st = statuses(run_dir)
    first = messages(run_dir)
    rerun_dir = run_dir + "-rerun"
    again = statuses(rerun_dir)
    again_msg = messages(rerun_dir)
    regressed, flaky = [], []
    missing = sorted(t for t in wanted if t not in st)
    for t in sorted(t for t in wanted if st.get(t) not in (None, "PASSED")):
        why = first.get(t, "")
        if again.get(t) == "PASSED":
            flaky.append(t)
            print(f"[{name}] FLAKY: {t} {st[t]}, then passed when run again alone; first failure: {why}")
        else:
            regressed.append(t)
            print(f"[{name}] REGRESSION: {t} is expected to pass and {st[t]}: {why}")
            if t in again:
                print(f"[{name}]   run again alone: {again[t]}: {again_msg.get(t, '')}")
    return regressed, flaky, missing


def core(name, results, expected_path, known_path):
    run_dir = os.path.join(results, name)
    expected = listed(expected_path)
    known = listed(known_path)
    st = statuses(run_dir)
    first = messages(run_dir)
    regressed, flaky, missing = judge(name, run_dir, expected)
    unexplained = sorted(t for t, s in st.items()
                         if s in ("FAILED", "ERROR") and t not in expected and t not in known)
    fixed = sorted(t for t in known if st.get(t) == "PASSED")
    for t in missing:
        print(f"[{name}] MISSING: {t} is expected to pass and did not run")
    for t in unexplained:
        print(f"[{name}] UNEXPLAINED: {t} {st[t]} and is in neither list: {first.get(t, '')}")
    for t in fixed:
        print(f"[{name}] now passes: {t} (move it from known-failures.txt to expected-pass.txt)")
    counts = {}
    for s in st.values():
        counts[s] = counts.get(s, 0) + 1
    print(f"[{name}] " + " ".join(f"{k}={counts.get(k, 0)}" for k in ("PASSED", "FAILED", "ERROR", "SKIPPED"))
          + f"; expected passes {len(expected) - len(regressed) - len(missing)}/{len(expected)}"
          + (f" ({len(flaky)} of them on a second run)" if flaky else ""))
    return 1 if regressed or missing or unexplained else 0


def features(name, results, features_path):
    run_dir = os.path.join(results, name + "-features")
    wanted = listed(features_path)
    regressed, flaky, missing = judge(name + "-features", run_dir, wanted)
    for t in missing:
        print(f"[{name}-features] REGRESSION: {t} is expected to pass and did not run")
    print(f"[{name}-features] expected passes {len(wanted) - len(regressed) - len(missing)}/{len(wanted)}"
          + (f" ({len(flaky)} of them on a second run)" if flaky else ""))
    return 1 if regressed or missing else 0


def rerun_list(run_dir, lists):
    wanted = {}
    for path in lists:
        wanted.update(listed(path))
    bad = failed_listed(run_dir, wanted)
    if 0 < len(bad) <= RERUN_MAX:
        print("\n".join(bad))
    return 0


def main(argv):
    if argv[:1] == ["core"] and len(argv) == 5:
        return core(*argv[1:])
    if argv[:1] == ["features"] and len(argv) == 4:
        return features(*argv[1:])
    if argv[:1] == ["rerun-list"] and len(argv) >= 3:
        return rerun_list(argv[1], argv[2:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

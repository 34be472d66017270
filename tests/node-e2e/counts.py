#!/usr/bin/env python3
"""The counts of an e2e_node run, from ginkgo's JUnit report, for scripts/node-e2e.

Prints every failed spec (with the first line of its failure and, indented below it, the
lines of its failure that say what did not match: a CI log is all there is of a CI run), with --list-skips every spec
skipped while running (a Skip() call: "skipped - REASON", as opposed to the bare "skipped" of
specs a --focus/--skip filter left out) with its reason, and as its last line
"N passed, N failed, N skipped". Exits 1 when a spec failed, no spec passed, the report is
missing or ginkgo exited non-zero (GINKGO_EXIT), else 0.

usage: counts.py --junit FILE --ginkgo-exit N [--list-skips]
"""
import argparse
import re
import sys
import xml.etree.ElementTree as ET


# How much of a failure's text is printed: gomega's struct matchers print the whole object
# (the stats summary is thousands of lines) and then what did not match, at the end.
DETAIL_LINES = 40
DETAIL_WIDTH = 240


def mismatch(lines):
    """The lines of a failure message that say what did not match. gomega's struct matchers
    dump each object they compare (the stats summary is thousands of lines); kept are the
    paths of the fields that failed (".Pods[ns::name].CPU:"), the comparisons ("Expected",
    "to be >=") and their short values ("<uint64>: 0"), or, with no such line, the message's
    last lines; at most DETAIL_LINES, each cut at DETAIL_WIDTH characters."""
    keep = [l for l in lines if LEAF.match(l) and not l.rstrip().endswith("{")]
    if not keep:
        keep = lines[-DETAIL_LINES:]
    out = [l.rstrip()[:DETAIL_WIDTH] for l in keep if l.strip()]
    if len(out) > DETAIL_LINES:
        out = out[:DETAIL_LINES] + [f"... ({len(out) - DETAIL_LINES} more lines)"]
    return out


LEAF = re.compile(r"^\s*([.\[]\S*:\s*$|Expected\s*$|to (be|equal|match|satisfy|have|contain)\b.{0,60}$"
                  r"|<[^>]{1,60}>: \S.{0,100}$)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--junit", required=True)
    ap.add_argument("--ginkgo-exit", type=int, required=True)
    ap.add_argument("--list-skips", action="store_true")
    a = ap.parse_args()
    try:
        cases = list(ET.parse(a.junit).getroot().iter("testcase"))
    except (OSError, ET.ParseError) as e:
        print(f"scripts/node-e2e: no JUnit report ({e}); ginkgo exited {a.ginkgo_exit}")
        print("0 passed, 0 failed, 0 skipped")
        return 1
    passed, failed, skipped, run_skips = 0, [], 0, []
    for c in cases:
        name = c.get("name", "")
        bad = c.find("failure") if c.find("failure") is not None else c.find("error")
        # Suite nodes ([SynchronizedBeforeSuite] and the like) are no specs: counted only when
        # they fail, since then no spec ran.
        suite_node = re.match(r"\[(Synchronized)?(Before|After)Suite\]|\[ReportAfterSuite\]",
                              name) is not None
        if bad is not None:
            msg = (bad.get("message") or bad.text or "").strip().splitlines()
            failed.append((name, msg[0] if msg else "", mismatch(msg[1:])))
        elif suite_node:
            continue
        elif c.find("skipped") is not None:
            skipped += 1
            why = c.find("skipped").get("message", "")
            if why != "skipped":
                run_skips.append((name, why))
        else:
            passed += 1
    for name, msg, detail in failed:
        print(f"FAILED: {name}" + (f": {msg}" if msg else ""))
        for line in detail:
            print(f"    {line}")
    if a.list_skips:
        for name, why in run_skips:
            print(f"SKIPPED while running: {name} ({why})")
    ok = not failed and passed > 0 and a.ginkgo_exit == 0
    if not ok and not failed:
        print(f"scripts/node-e2e: ginkgo exited {a.ginkgo_exit} with {passed} specs passed")
    print(f"{passed} passed, {len(failed)} failed, {skipped} skipped")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

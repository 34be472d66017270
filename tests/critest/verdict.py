#!/usr/bin/env python3
"""The verdict on a critest run, from its JUnit report (ginkgo's), for scripts/critest.

Prints every failed spec, every skipped spec the policy does not allow (with --strict-skips),
why the run fails if it does, and as its last line "N passed, N failed, N skipped".
Exits 1 when a spec failed, a skip was not allowed, no spec passed, the report is missing
or critest itself exited non-zero.

usage: verdict.py --junit FILE --allowed-skips RE --critest-exit N [--strict-skips]
  Specs left out by a filter (ginkgo's --skip/--focus: reported with the bare message
  "skipped") are counted as skipped and always allowed; a spec skipped while running (a
  Skip() call, reported as "skipped - REASON") is allowed when RE matches its reason.
"""
import argparse, re, sys
import xml.etree.ElementTree as ET


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--junit", required=True)
    ap.add_argument("--allowed-skips", required=True)
    ap.add_argument("--critest-exit", type=int, required=True)
    ap.add_argument("--strict-skips", action="store_true")
    a = ap.parse_args()
    allowed = re.compile(a.allowed_skips)

    passed, failed, skipped, unexpected = 0, [], 0, []
    try:
        cases = list(ET.parse(a.junit).getroot().iter("testcase"))
    except (OSError, ET.ParseError) as e:
        print(f"scripts/critest: no JUnit report ({e}); critest exited {a.critest_exit}")
        print("0 passed, 0 failed, 0 skipped")
        return 1
    for c in cases:
        name = c.get("name", "")
        bad = c.find("failure") if c.find("failure") is not None else c.find("error")
        # Suite-level nodes ([BeforeSuite] and the like) are no specs: count them only when
        # they fail, since then no spec ran.
        suite_node = re.match(r"\[(Synchronized)?(Before|After)Suite\]", name) is not None
        if bad is not None:
            failed.append((name, (bad.get("message") or "").strip().splitlines()[:1]))
        elif suite_node:
            continue
        elif c.find("skipped") is not None:
            skipped += 1
            why = c.find("skipped").get("message", "")
            if a.strict_skips and why != "skipped" and not allowed.search(why):
                unexpected.append(f"{name} ({why})")
        else:
            passed += 1
    for name, msg in failed:
        print(f"FAILED: {name}" + (f": {msg[0]}" if msg else ""))
    for u in unexpected:
        print(f"UNEXPECTED SKIP: {u}")
    ok = not failed and not unexpected and passed > 0 and a.critest_exit == 0
    if not ok and not failed and not unexpected:
        print(f"scripts/critest: critest exited {a.critest_exit} with {passed} specs passed")
    print(f"{passed} passed, {len(failed)} failed, {skipped} skipped")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

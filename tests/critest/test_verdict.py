#!/usr/bin/env python3
"""The failure policy of scripts/critest (verdict.py) on JUnit reports shaped as ginkgo writes
them. Run: python3 -m unittest discover -s tests/critest -p 'test_*.py'"""
import os, subprocess, sys, tempfile, unittest

VERDICT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "verdict.py")
APPARMOR = "AppArmor is disabled on this host"

PASSED = '<testcase name="[It] a" status="passed"></testcase>'
FILTERED = ('<testcase name="[It] b benchmark" status="skipped">'
            '<skipped message="skipped"></skipped></testcase>')
APPARMOR_SKIP = ('<testcase name="[It] c AppArmor" status="skipped">'
                 f'<skipped message="skipped - {APPARMOR}"></skipped></testcase>')
NRI_SKIP = ('<testcase name="[It] d NRI" status="skipped"><skipped message="skipped - NRI '
            'socket not configured (use -nri-socket flag)"></skipped></testcase>')
FAILED = ('<testcase name="[It] e" status="failed"><failure message="Expected 1 to equal 4" '
          'type="failed"></failure></testcase>')
SUITE_OK = '<testcase name="[BeforeSuite]" status="passed"></testcase>'
SUITE_FAILED = ('<testcase name="[BeforeSuite]" status="failed">'
                '<failure message="no connection"></failure></testcase>')


def verdict(cases, critest_exit=0, strict=True, junit=None):
    with tempfile.TemporaryDirectory() as d:
        path = junit or os.path.join(d, "junit.xml")
        if junit is None:
            with open(path, "w") as f:
                f.write("<testsuites><testsuite>" + "".join(cases) + "</testsuite></testsuites>")
        args = [sys.executable, VERDICT, "--junit", path, "--allowed-skips", APPARMOR,
                "--critest-exit", str(critest_exit)] + (["--strict-skips"] if strict else [])
        p = subprocess.run(args, capture_output=True, text=True)
        return p.returncode, p.stdout.splitlines()


class Policy(unittest.TestCase):
    def test_passes_filtered_and_apparmor_skips_pass(self):
        rc, out = verdict([SUITE_OK, PASSED, FILTERED, APPARMOR_SKIP])
        self.assertEqual(rc, 0, out)
        self.assertEqual(out[-1], "1 passed, 0 failed, 2 skipped")

    def test_a_failed_spec_fails_and_is_named(self):
        rc, out = verdict([PASSED, FAILED])
        self.assertEqual(rc, 1)
        self.assertIn("FAILED: [It] e: Expected 1 to equal 4", out)
        self.assertEqual(out[-1], "1 passed, 1 failed, 0 skipped")

    def test_another_runtime_skip_fails_only_when_strict(self):
        rc, out = verdict([PASSED, NRI_SKIP])
        self.assertEqual(rc, 1)
        self.assertTrue(any(l.startswith("UNEXPECTED SKIP: [It] d NRI") for l in out), out)
        self.assertEqual(verdict([PASSED, NRI_SKIP], strict=False)[0], 0)

    def test_a_failed_suite_node_fails(self):
        rc, out = verdict([SUITE_FAILED, FILTERED])
        self.assertEqual(rc, 1)
        self.assertEqual(out[-1], "0 passed, 1 failed, 1 skipped")

    def test_critest_exiting_non_zero_fails_even_if_the_report_is_clean(self):
        self.assertEqual(verdict([PASSED], critest_exit=124)[0], 1)

    def test_nothing_passed_fails(self):
        self.assertEqual(verdict([FILTERED])[0], 1)

    def test_no_report_fails(self):
        rc, out = verdict([], critest_exit=1, junit="/nonexistent/junit.xml")
        self.assertEqual(rc, 1)
        self.assertEqual(out[-1], "0 passed, 0 failed, 0 skipped")


if __name__ == "__main__":
    unittest.main()

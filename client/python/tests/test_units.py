import datetime
import math
import unittest

import support  # noqa: F401  (sys.path)
from lossd_client import LossdError, LossdInputError
from lossd_client.units import (format_duration, format_ports, format_rate, parse_duration,
                                parse_labels, parse_ports, parse_rate, wilson_interval)


class RateTest(unittest.TestCase):
    def test_percent_strings(self):
        self.assertEqual(parse_rate("1%"), 0.01)
        self.assertEqual(parse_rate("0.005%"), 5e-05)
        self.assertEqual(parse_rate(" 2.5 % "), 0.025)
        self.assertEqual(parse_rate("100%"), 1.0)
        self.assertEqual(parse_rate("0%"), 0.0)
        self.assertEqual(parse_rate(".5%"), 0.005)
        self.assertEqual(parse_rate("1e-3%"), 1e-05)

    def test_ppm(self):
        self.assertEqual(parse_rate("50ppm"), 5e-05)
        self.assertEqual(parse_rate("1000000ppm"), 1.0)

    def test_fractions(self):
        self.assertEqual(parse_rate(0.01), 0.01)
        self.assertEqual(parse_rate("0.01"), 0.01)
        self.assertEqual(parse_rate("1e-4"), 1e-4)
        self.assertEqual(parse_rate(0), 0.0)
        self.assertEqual(parse_rate(1), 1.0)
        self.assertIsInstance(parse_rate(1), float)

    def test_exact_decimal_conversion(self):
        # "0.07%" must be the double nearest 0.0007, not 0.07 / 100 rounded twice
        self.assertEqual(parse_rate("0.07%"), float("0.0007"))
        self.assertEqual(parse_rate("0.1%"), 0.001)

    def test_refused(self):
        for bad in (5, 1.5, "5", "150%", -0.1, "-1%", "abc", "1%%", "%", "", None, True,
                    float("nan"), float("inf"), "1 percent", [0.1]):
            with self.subTest(bad=bad):
                with self.assertRaises(LossdInputError) as cm:
                    parse_rate(bad)
                self.assertEqual(cm.exception.code, "INVALID_ARGUMENT")
                self.assertTrue(cm.exception.local)

    def test_above_one_says_percent(self):
        with self.assertRaisesRegex(LossdInputError, "write '5%' for percent"):
            parse_rate(5)

    def test_error_is_value_error_and_lossd_error(self):
        with self.assertRaises(ValueError):
            parse_rate("x")
        with self.assertRaises(LossdError):
            parse_rate("x")

    def test_error_names_the_field(self):
        with self.assertRaisesRegex(LossdInputError, r"^INVALID_ARGUMENT: ge\.p: "):
            parse_rate("x", "ge.p")

    def test_format(self):
        self.assertEqual(format_rate(0.01), "1%")
        self.assertEqual(format_rate(5e-05), "0.005%")
        self.assertEqual(format_rate(0), "0%")
        self.assertEqual(format_rate(1), "100%")
        self.assertEqual(format_rate(None), "-")
        self.assertEqual(format_rate(0.0123456), "1.235%")

    def test_format_parse_roundtrip(self):
        for r in (0.01, 5e-05, 0.25, 1e-06, 0.5):
            self.assertAlmostEqual(parse_rate(format_rate(r, 12)), r, places=15)


class DurationTest(unittest.TestCase):
    def test_units(self):
        cases = {
            "30s": 30 * 10**9, "500ms": 500 * 10**6, "1.5s": 1500 * 10**6, "250us": 250000,
            "250µs": 250000, "100ns": 100, "1m": 60 * 10**9, "2min": 120 * 10**9,
            "1h": 3600 * 10**9, "1d": 86400 * 10**9, "2m30s": 150 * 10**9,
            "1h2m3s": 3723 * 10**9, "1m 30s": 90 * 10**9, "0.1s": 10**8, "0s": 0, " 5s ": 5 * 10**9,
            "1s500ms": 1500 * 10**6, "3sec": 3 * 10**9,
            # accepted since the spellings were unified with lossd's (exponents, any case)
            "1e3s": 1000 * 10**9, "30S": 30 * 10**9,
        }
        for text, ns in cases.items():
            with self.subTest(text=text):
                self.assertEqual(parse_duration(text), ns)

    def test_numbers_are_seconds(self):
        self.assertEqual(parse_duration(30), 30 * 10**9)
        self.assertEqual(parse_duration(0.5), 5 * 10**8)
        self.assertEqual(parse_duration(0.1), 10**8)  # no float noise
        self.assertEqual(parse_duration("30"), 30 * 10**9)
        self.assertEqual(parse_duration("0.25"), 25 * 10**7)

    def test_timedelta(self):
        self.assertEqual(parse_duration(datetime.timedelta(seconds=1, milliseconds=5)), 1005 * 10**6)
        self.assertEqual(parse_duration(datetime.timedelta(days=1)), 86400 * 10**9)

    def test_refused(self):
        for bad in ("-1s", "30x", "", "s", "1.2.3s", "ms30", "1 s x", "30s-", None, True, [1],
                    -1, float("nan"), "1e3x", "1e1234s"):
            with self.subTest(bad=bad):
                with self.assertRaises(LossdInputError):
                    parse_duration(bad)

    def test_nanoseconds_passed_as_a_number_are_refused(self):
        with self.assertRaisesRegex(LossdInputError, "nanoseconds"):
            parse_duration(40 * 10**9)
        with self.assertRaisesRegex(LossdInputError, "nanoseconds"):
            parse_duration("40000000000")
        self.assertEqual(parse_duration("40000000000ns"), 40 * 10**9)

    def test_too_big(self):
        with self.assertRaisesRegex(LossdInputError, "64 bits"):
            parse_duration("1000000000d")

    def test_error_names_the_field(self):
        with self.assertRaisesRegex(LossdInputError, "^INVALID_ARGUMENT: ttl: "):
            parse_duration("soon", "ttl")

    def test_format(self):
        self.assertEqual(format_duration(30 * 10**9), "30s")
        self.assertEqual(format_duration(1500 * 10**6), "1.5s")
        self.assertEqual(format_duration(500 * 10**6), "500ms")
        self.assertEqual(format_duration(1500), "1.5us")
        self.assertEqual(format_duration(999), "999ns")
        self.assertEqual(format_duration(150 * 10**9), "2m30s")
        self.assertEqual(format_duration(3600 * 10**9), "1h")
        self.assertEqual(format_duration(3723 * 10**9), "1h2m3s")
        self.assertEqual(format_duration(None), "-")

    def test_format_parse_roundtrip(self):
        for ns in (100, 1500, 500 * 10**6, 30 * 10**9, 150 * 10**9, 3723 * 10**9):
            self.assertEqual(parse_duration(format_duration(ns)), ns)


class PortsTest(unittest.TestCase):
    def test_forms(self):
        self.assertIsNone(parse_ports(None))
        self.assertEqual(parse_ports(8080), (8080, 8080))
        self.assertEqual(parse_ports("8080"), (8080, 8080))
        self.assertEqual(parse_ports("8000-8100"), (8000, 8100))
        self.assertEqual(parse_ports("8000:8100"), (8000, 8100))
        self.assertEqual(parse_ports(" 8000 - 8100 "), (8000, 8100))
        self.assertEqual(parse_ports((1, 2)), (1, 2))
        self.assertEqual(parse_ports([1, 2]), (1, 2))
        self.assertEqual(parse_ports(range(10, 21)), (10, 20))
        self.assertEqual(parse_ports("0-1023"), (0, 1023))
        self.assertEqual(parse_ports(65535), (65535, 65535))

    def test_refused(self):
        for bad in (0, "0", (0, 0), 65536, -1, "9-1", "x", "80,81", True, (1,), (1, 2, 3),
                    ("1", "2"), range(10, 10), range(0, 10, 2), 8080.0):
            with self.subTest(bad=bad):
                with self.assertRaises(LossdInputError):
                    parse_ports(bad, "dport")

    def test_zero_explains(self):
        with self.assertRaisesRegex(LossdInputError, "dport: port 0 means any port"):
            parse_ports(0, "dport")

    def test_format(self):
        self.assertEqual(format_ports((80, 80)), "80")
        self.assertEqual(format_ports((80, 90)), "80-90")
        self.assertEqual(format_ports(None), "any")


class LabelsTest(unittest.TestCase):
    def test_forms(self):
        self.assertEqual(parse_labels(None), {})
        self.assertEqual(parse_labels({"a": "b"}), {"a": "b"})
        self.assertEqual(parse_labels("a=b, c=d=e"), {"a": "b", "c": "d=e"})
        self.assertEqual(parse_labels(["a=b", "c="]), {"a": "b", "c": ""})

    def test_refused(self):
        for bad in ("a", ["a"], {"": "x"}, {"a": 1}, {1: "a"}, "=b"):
            with self.subTest(bad=bad):
                with self.assertRaises(LossdInputError):
                    parse_labels(bad)


class WilsonTest(unittest.TestCase):
    def test_known_95(self):
        lo, hi = wilson_interval(10, 1000, confidence=0.95)
        self.assertAlmostEqual(lo, 0.005441, places=5)
        self.assertAlmostEqual(hi, 0.018305, places=5)

    def test_edges(self):
        self.assertEqual(wilson_interval(0, 0), (0.0, 1.0))
        lo, hi = wilson_interval(0, 1000)
        self.assertEqual(lo, 0.0)
        self.assertGreater(hi, 0)
        lo, hi = wilson_interval(1000, 1000)
        self.assertEqual(hi, 1.0)
        self.assertLess(lo, 1)
        with self.assertRaises(ValueError):
            wilson_interval(5, 4)

    def test_contains_p_and_narrows(self):
        prev = 1.0
        for n in (100, 1000, 10000, 100000):
            lo, hi = wilson_interval(n // 100, n)
            self.assertLessEqual(lo, 0.01)
            self.assertGreaterEqual(hi, 0.01)
            self.assertLess(hi - lo, prev)
            prev = hi - lo

    def test_999_wider_than_95(self):
        a = wilson_interval(10, 1000, 0.95)
        b = wilson_interval(10, 1000)
        self.assertLess(b[0], a[0])
        self.assertGreater(b[1], a[1])
        self.assertTrue(all(math.isfinite(x) for x in b))


if __name__ == "__main__":
    unittest.main()

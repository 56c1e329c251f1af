"""What the Python package does with bad input, run by tests/capi.rs
against an emulator at $INAGG_TEST_SWITCH that has no job installed.

Creating a worker contacts nobody (but a controller), so workers here are
real; only the all-reduce of test_a_job_the_switch_lacks_times_out sends.
"""

import array
import os
import socket
import threading
import unittest

import numpy as np

import inagg

SWITCH = os.environ["INAGG_TEST_SWITCH"]


def worker(**options):
    base = dict(switch=SWITCH, bind="127.0.0.1:0", job=1, worker=0, workers=2, pool_size=8)
    base.update(options)
    return inagg.Worker(**base)


class ConfigErrors(unittest.TestCase):
    def test_bad_keys_and_values_name_the_key(self):
        cases = [
            (dict(wokers=2), 'unknown key "wokers"; the keys are switch, bind'),
            (dict(workers=None), "workers is needed (without controller)"),
            (dict(elements=0), "elements per packet 0 must be 1 to"),
            (dict(worker=3), "worker id 3 is not below the worker count 2"),
            (dict(timeout=-1), "timeout=-1: give a number of seconds above 0"),
            (dict(switch="nowhere"), 'switch="nowhere": not an address'),
            (dict(pool_size=True), "pool_size=True: not a number or an address"),
        ]
        for options, message in cases:
            with self.subTest(options=options):
                with self.assertRaises(inagg.ConfigError) as e:
                    worker(**options)
                self.assertIn(message, str(e.exception))
                self.assertIsInstance(e.exception, ValueError)
                self.assertEqual(e.exception.code, -2)

    def test_an_address_in_use_is_a_network_error(self):
        held = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        held.bind(("127.0.0.1", 0))
        try:
            address = "127.0.0.1:%d" % held.getsockname()[1]
            with self.assertRaises(inagg.NetworkError) as e:
                worker(bind=address)
            self.assertIn("in use", str(e.exception))
            self.assertIsInstance(e.exception, OSError)
        finally:
            held.close()

    def test_a_controller_that_is_not_there_is_a_network_error(self):
        with self.assertRaises(inagg.NetworkError) as e:
            inagg.Worker(controller="127.0.0.1:1", job="resnet", rank=0, bind="127.0.0.1:5999")
        self.assertIn('register rank 0 of job "resnet" at 127.0.0.1:1: cannot reach the controller', str(e.exception))


class BufferErrors(unittest.TestCase):
    def setUp(self):
        self.w = worker()

    def tearDown(self):
        self.w.close()

    def test_only_writable_contiguous_float32_and_int32_buffers(self):
        cases = [
            (np.zeros(8, dtype=np.float64), TypeError, "format 'd', 8 bytes each"),
            (np.zeros(8, dtype=np.int16), TypeError, "format 'h', 2 bytes each"),
            (np.zeros(8, dtype=">f4"), TypeError, "format '>f'"),
            (b"abcd", TypeError, "format 'B'"),
            (object(), TypeError, "object does not expose a buffer"),
            ([1.0, 2.0], TypeError, "list does not expose a buffer"),
            (memoryview(array.array("f", [1.0])).toreadonly(), ValueError, "read-only"),
            (np.zeros(16, dtype=np.float32)[::2], ValueError, "not C-contiguous"),
        ]
        for buf, kind, message in cases:
            with self.subTest(buf=type(buf).__name__, message=message):
                with self.assertRaises(kind) as e:
                    self.w.allreduce(buf)
                self.assertIn(message, str(e.exception))
        # None of them reached the switch: the worker is still usable.
        self.assertEqual(self.w.allreduce(np.zeros(0, dtype=np.float32)).packets_sent, 0)

    def test_a_closed_worker_refuses_calls(self):
        self.w.close()
        with self.assertRaises(ValueError) as e:
            self.w.allreduce(array.array("i", [1]))
        self.assertIn("closed", str(e.exception))
        self.w.close()  # twice is fine


class Failures(unittest.TestCase):
    def test_a_job_the_switch_lacks_times_out_then_the_worker_refuses(self):
        with worker(job=77, timeout=0.5) as w:
            data = array.array("i", range(100))
            with self.assertRaises(inagg.TimeoutError) as e:
                w.allreduce(data)
            self.assertIn("no result from the switch at %s for job 77" % SWITCH, str(e.exception))
            self.assertIsInstance(e.exception, TimeoutError)  # the builtin
            with self.assertRaises(inagg.WorkerFailed) as e:
                w.allreduce(data)
            self.assertIn("an earlier all-reduce of this worker failed", str(e.exception))

    def test_info_says_what_the_worker_runs_as(self):
        with worker(job=5, worker=1, workers=3, pool_size=16, elements=128, priority=2, timeout=3) as w:
            info = w.info
            self.assertEqual(
                {k: info[k] for k in ("job", "worker", "rank", "workers", "pool_size", "elements", "priority")},
                dict(job=5, worker=1, rank=1, workers=3, pool_size=16, elements=128, priority=2),
            )
            self.assertEqual((info["switch"], info["backend"], info["timeout_s"]), (SWITCH, "socket", 3.0))
            self.assertTrue(info["local"].startswith("127.0.0.1:"))
            self.assertNotEqual(info["local"], "127.0.0.1:0")
            self.assertEqual(w.workers, 3)

    def test_one_worker_is_safe_from_two_threads(self):
        # A one-worker job is not installed, so each call times out; two
        # threads calling at once take turns (the second sees the failure).
        w = worker(job=78, workers=1, timeout=0.3)
        errors = []

        def call():
            try:
                w.allreduce(array.array("f", [1.0] * 10))
            except inagg.Error as e:
                errors.append(type(e).__name__)

        threads = [threading.Thread(target=call) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        w.close()
        self.assertEqual(sorted(errors), ["TimeoutError", "WorkerFailed"])


if __name__ == "__main__":
    unittest.main()

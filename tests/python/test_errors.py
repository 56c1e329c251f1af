"""What the Python package does with bad input, run by tests/capi.rs
against an emulator at $INAGG_TEST_SWITCH that has one job installed, for
one worker ($INAGG_TEST_SOLO_JOB at $INAGG_TEST_SOLO_BIND).

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
# A one-worker job the test installed, pool 8, K = 64: its id and endpoint.
SOLO_JOB = int(os.environ["INAGG_TEST_SOLO_JOB"])
SOLO_BIND = os.environ["INAGG_TEST_SOLO_BIND"]


def worker(**options):
    base = dict(switch=SWITCH, bind="127.0.0.1:0", job=1, worker=0, workers=2, pool_size=8)
    base.update(options)
    return inagg.Worker(**base)


class ConfigErrors(unittest.TestCase):
    def test_bad_keys_and_values_name_the_key(self):
        cases = [
            (dict(wokers=2), 'unknown key "wokers"; the keys are switch, bind'),
            (dict(workers=None), "workers is needed (without controller)"),
            (dict(elements=1), "elements per packet 1 must be 2 to"),
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

    def test_an_unreadable_ca_is_a_config_error_before_anything_is_sent(self):
        with self.assertRaises(inagg.ConfigError) as e:
            inagg.Worker(controller="127.0.0.1:1", job="resnet", rank=0, bind="127.0.0.1:5999",
                         tls_ca="/nonexistent/ca.pem")
        self.assertIn("tls: CA /nonexistent/ca.pem", str(e.exception))


class BufferErrors(unittest.TestCase):
    def setUp(self):
        self.w = worker()

    def tearDown(self):
        self.w.close()

    def test_only_writable_contiguous_buffers_of_the_four_types(self):
        cases = [
            (np.zeros(8, dtype=np.float64), TypeError, "format 'd', 8 bytes each"),
            (np.zeros(8, dtype=">f2"), TypeError, "format '>e'"),
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
        # A dtype names how to read the buffer, and must agree with it.
        dtyped = [
            (np.zeros(8, dtype=np.float16), "bf16", TypeError, "format 'e', 2 bytes each (dtype 'bf16')"),
            (np.zeros(8, dtype=np.float32), "f16", TypeError, "format 'f', 4 bytes each (dtype 'f16')"),
            (np.zeros(8, dtype=np.int32), "f32", TypeError, "(dtype 'f32')"),
            (np.zeros(8, dtype=np.int16), "f64", ValueError, "dtype 'f64': give one of f32, i32, f16, bf16"),
        ]
        for buf, dtype, kind, message in dtyped:
            with self.subTest(dtype=dtype, message=message):
                with self.assertRaises(kind) as e:
                    self.w.allreduce(buf, dtype=dtype)
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


def solo(**options):
    return worker(job=SOLO_JOB, bind=SOLO_BIND, workers=1, elements=64, timeout=5, **options)


class Schedules(unittest.TestCase):
    def test_bad_policies_are_refused_before_anything_runs(self):
        with worker() as w:
            for args, message in [
                (dict(policy="lifo"), 'policy "lifo": give fifo, p3 or bytescheduler'),
                (dict(policy="p3", credit=2), "p3 sends one slice at a time"),
                (dict(slice=0), "slice 0 and credit 2: both must be at least 1"),
                (dict(dtype="f64"), "dtype 'f64'"),
            ]:
                with self.subTest(args=args):
                    with self.assertRaises(ValueError) as e:
                        w.schedule(2, **args)
                    self.assertIn(message, str(e.exception))
            # Negative and huge counts: refused, never reserved for (a
            # negative one would reach the library as a huge size).
            for tensors, args, message in [
                (-1, {}, "tensors -1: must not be negative"),
                (2, dict(slice=-1), "slice -1: must not be negative"),
                (2, dict(credit=-5), "credit -5: must not be negative"),
                (1 << 40, {}, "1099511627776 tensors: a schedule takes at most 16777216"),
                (2, dict(slice=1 << 40), "at most 1073741824 elements a slice"),
            ]:
                with self.subTest(tensors=tensors, args=args):
                    with self.assertRaises(ValueError) as e:
                        w.schedule(tensors, **args)
                    self.assertIn(message, str(e.exception))
            with self.assertRaises(TypeError) as e:
                w.schedule(2.5)
            self.assertIn("tensors must be an int, not float", str(e.exception))
            # Nothing started: the worker still takes a schedule.
            self.assertIsNone(w._schedule)

    def test_a_schedule_on_one_worker_checks_its_calls(self):
        with solo() as w:
            a = np.arange(1000, dtype=np.int32)
            b = np.arange(300, dtype=np.int32) * -7
            s = w.schedule(2, policy="p3", slice=128, credit=1, dtype="i32")
            with self.assertRaises(ValueError) as e:
                w.allreduce(np.zeros(4, dtype=np.int32))
            self.assertIn("a schedule is running on this worker", str(e.exception))
            with self.assertRaises(ValueError) as e:
                s.wait()
            self.assertIn("nothing to wait for: 0 of 2 tensors submitted", str(e.exception))
            with self.assertRaises(TypeError) as e:
                s.submit(np.zeros(4, dtype=np.float32))
            self.assertIn("the schedule sums i32; this buffer's items are format 'f', 4 bytes each", str(e.exception))
            self.assertEqual((s.submit(a, rank=1), s.submit(b, rank=0)), (0, 1))
            with self.assertRaises(ValueError) as e:
                s.submit(np.zeros(4, dtype=np.int32))
            self.assertIn("all 2 tensors of the schedule are submitted already", str(e.exception))
            self.assertEqual(sorted([s.wait(), s.wait()]), [0, 1])
            s.end()
            self.assertGreater(s.epochs, 0)
            self.assertGreater(s.transport.packets_sent, 0)
            # One worker's sum is its own tensor; the worker is given back.
            np.testing.assert_array_equal(a, np.arange(1000, dtype=np.int32))
            np.testing.assert_array_equal(b, np.arange(300, dtype=np.int32) * -7)
            c = np.full(100, 3, dtype=np.int32)
            w.allreduce(c)
            np.testing.assert_array_equal(c, np.full(100, 3, dtype=np.int32))

    def test_a_schedule_ended_early_fails_the_worker(self):
        with solo() as w:
            s = w.schedule(2, policy="fifo", slice=64, credit=1, dtype="f32")
            s.submit(np.ones(10, dtype=np.float32))
            with self.assertRaises(inagg.ConfigError) as e:
                s.end()
            self.assertIn("the tensor source closed after 1 of 2 tensors", str(e.exception))
            with self.assertRaises(inagg.WorkerFailed):
                w.allreduce(np.ones(10, dtype=np.float32))


if __name__ == "__main__":
    unittest.main()

"""The driver JVM's shutdown hook (driver.shutdown_hook), over a fake of the JVM handles:
Spark's own hooks may go on only once the run has ended *and* the driver has either halted
the JVM with 0 or decided not to. Returning when the run merely finished let the JVM end
with 143 while the driver was still stopping the SparkContext before its halt."""

from __future__ import annotations

import threading
import time
from typing import Any

from leakproof.driver.control import RunControl, RunLimits
from leakproof.driver.shutdown_hook import JvmShutdownHook


class _Runtime:
    def __init__(self) -> None:
        self.halted: list[int] = []

    def getRuntime(self) -> _Runtime:  # noqa: N802 - Java's name
        return self

    def halt(self, code: int) -> None:
        self.halted.append(code)


class _Manager:
    def __init__(self) -> None:
        self.removed: list[Any] = []
        self.shutting_down = False

    def isShutdownInProgress(self) -> bool:  # noqa: N802 - Java's name
        return self.shutting_down

    def removeShutdownHook(self, thread: Any) -> bool:  # noqa: N802 - Java's name
        self.removed.append(thread)
        return True


class _Sc:
    def __init__(self) -> None:
        self.runtime = _Runtime()
        self.stopped = 0
        sc = self

        class _Jsc:
            def stop(self) -> None:
                sc.stopped += 1

        class _Lang:
            Runtime = self.runtime

        class _Java:
            lang = _Lang

        class _Jvm:
            java = _Java

        self._jsc = _Jsc()
        self._jvm = _Jvm()


def hook_for(submitted: bool = True) -> tuple[JvmShutdownHook, RunControl, _Sc, _Manager]:
    control = RunControl(RunLimits())
    sc, manager = _Sc(), _Manager()
    hook = JvmShutdownHook(sc, control, timeout_s=5.0)
    hook._submitted = submitted
    hook._manager, hook._thread = manager, object()
    return hook, control, sc, manager


def run_in_background(hook: JvmShutdownHook) -> threading.Thread:
    thread = threading.Thread(target=hook.run, daemon=True)
    thread.start()
    return thread


def test_the_hook_holds_spark_back_until_the_driver_has_halted_the_jvm() -> None:
    hook, control, sc, _ = hook_for()
    held = run_in_background(hook)
    deadline = time.monotonic() + 2
    while not control.asked_to_stop and time.monotonic() < deadline:
        time.sleep(0.01)
    assert control.asked_to_stop  # the JVM's shutdown asked the run to stop
    control.finish(0)
    time.sleep(0.2)
    assert held.is_alive()  # finished, but done() has not halted yet: Spark must still wait
    hook.done(0)
    assert sc.stopped == 1 and sc.runtime.halted == [0]
    held.join(1)  # the fake halt returns: the hook lets go, as after a failed halt
    assert not held.is_alive()


def test_a_failed_run_lets_spark_hooks_go_on_without_a_halt() -> None:
    hook, control, sc, _ = hook_for()
    held = run_in_background(hook)
    time.sleep(0.1)
    control.finish(1)
    hook.done(1)
    held.join(1)
    assert not held.is_alive() and sc.runtime.halted == []


def test_a_normal_end_takes_the_hook_back_and_never_halts() -> None:
    hook, control, sc, manager = hook_for(submitted=False)
    control.finish(0)
    hook.done(0)
    assert manager.removed == [hook._thread] and sc.runtime.halted == []


def test_a_signal_under_spark_submit_halts_with_0_even_before_the_jvm_hook_ran() -> None:
    hook, control, sc, _ = hook_for(submitted=True)
    control.request_stop("SIGTERM received", operator=True)
    control.signalled = True
    control.finish(0)
    hook.done(0)
    assert sc.runtime.halted == [0]

"""The driver JVM's shutdown hook: a SIGTERM to spark-submit's process group lets the batch
in flight finish and commit, and a clean stop ends the JVM with the run's exit code (0, or
a bounded run's ``BOUND_NOT_REACHED``) rather than 143."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from typing import Any

from leakproof.driver.bounds import BOUND_NOT_REACHED
from leakproof.driver.control import RunControl

log = logging.getLogger(__name__)


class JvmShutdownHook:
    """Lets the batch in flight finish before the driver JVM's shutdown stops Spark.

    Under spark-submit the driver JVM is this process's parent and shares its process group,
    so a supervisor's SIGTERM to the group (systemd, a container stop) reaches it too. Its
    shutdown hooks would stop the SparkContext, and with it the Python workers of the batch
    in flight. Spark's hooks run as one Hadoop shutdown hook of priority 40; this one runs
    before them (priority 100): it asks the run to stop and waits until it has, for at most
    ``job.stop_timeout_s``. Py4J calls ``run`` on a JVM thread; the Java Thread that wraps it
    is what Hadoop holds, so the same object can be removed when the run ends normally.
    """

    PRIORITY = 100
    RELEASE_S = 15.0  # done(): a SparkContext stop of at most 5 s, then the halt

    def __init__(self, sc: Any, control: RunControl, timeout_s: float) -> None:
        self._sc = sc
        self._submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # the JVM is our parent
        self._control = control
        self._timeout_s = timeout_s
        self._manager: Any = None
        self._thread: Any = None
        self.triggered = False  # the JVM's shutdown began and called run()
        # Set once done() has decided not to halt: only then may Spark's hooks go on. Were
        # run() to return when the run finishes, the JVM could end (with 143) while done()
        # is still stopping the SparkContext before its halt(0).
        self._released = threading.Event()

    @classmethod
    def install(cls, sc: Any, control: RunControl, timeout_s: float) -> JvmShutdownHook | None:
        hook = cls(sc, control, timeout_s)
        try:
            jvm = sc._jvm
            hook._manager = jvm.org.apache.hadoop.util.ShutdownHookManager.get()
            hook._thread = jvm.java.lang.Thread(hook)
            hook._manager.addShutdownHook(hook._thread, cls.PRIORITY,
                                          round(timeout_s + cls.RELEASE_S) + 5,
                                          jvm.java.util.concurrent.TimeUnit.SECONDS)
        except Exception:
            log.warning("could not install the JVM shutdown hook; a SIGTERM to the driver "
                        "JVM will not wait for the batch in flight", exc_info=True)
            return None
        return hook

    def done(self, exit_code: int | None) -> None:
        """The run is over (main thread). If the JVM is shutting down and the run ended
        with 0, end the JVM with 0 too: after SIGTERM it would exit 143 even after a clean
        stop, which supervisors count as a failure. So stop the SparkContext (Spark's own
        hook would) and halt; what else is left, Hadoop's file system caches, holds nothing
        of ours. Otherwise take the hook back, so a normal exit does not call into a Python
        process that has gone."""
        # A group SIGTERM reaches this process and the JVM at once, and the driver may finish
        # before the JVM has even begun its shutdown; it would then exit 143 afterwards. So
        # under spark-submit a driver stopped by a signal ends the JVM itself, whatever the
        # order: if the signal reached only this process, exit 0 is still the right answer.
        shutting_down = self.triggered or (self._submitted and self._control.signalled)
        if not shutting_down:
            try:
                shutting_down = bool(self._manager.isShutdownInProgress())
            except Exception:
                log.debug("could not ask the JVM whether it is shutting down", exc_info=True)
        if not shutting_down:
            self._released.set()
            with contextlib.suppress(Exception):  # the JVM may already be going
                self._manager.removeShutdownHook(self._thread)
            return
        if exit_code not in (0, BOUND_NOT_REACHED):
            self._released.set()
            return  # Spark's own hooks go on; the exit code says what happened
        # A tidy SparkContext stop when it comes quickly (during the JVM's shutdown it can
        # block on the cluster manager), then the halt: every commit is already made.
        log.info("the driver JVM is shutting down: stopping the SparkContext and ending the "
                 "JVM with exit code %d", exit_code)
        stopper = threading.Thread(target=self._stop_context, daemon=True)
        stopper.start()
        stopper.join(5.0)
        with contextlib.suppress(Exception):  # halt never answers: the JVM is gone
            self._sc._jvm.java.lang.Runtime.getRuntime().halt(exit_code)
        self._released.set()  # only if the halt could not be made

    def _stop_context(self) -> None:
        try:
            self._sc._jsc.stop()
        except Exception:
            log.debug("stopping the SparkContext before the halt failed", exc_info=True)

    def run(self) -> None:
        """Called by the JVM's shutdown: stop the run, and keep Spark's own hooks waiting
        until it has stopped (``done`` then ends the JVM)."""
        self.triggered = True
        self._control.request_stop("the driver JVM is shutting down (SIGTERM)", operator=True)
        if self._control.wait_finished(self._timeout_s):
            self._released.wait(self.RELEASE_S)  # done() halts the JVM or releases it

    # Py4J forwards these to Python: Hadoop keeps hooks in a set.
    def hashCode(self) -> int:  # noqa: N802 - Java's name
        return id(self) & 0x7FFFFFFF

    def equals(self, other: object) -> bool:
        return other is self

    def toString(self) -> str:  # noqa: N802 - Java's name
        return "leakproof: finish the batch in flight"

    class Java:
        implements = ["java.lang.Runnable"]

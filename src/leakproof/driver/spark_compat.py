"""Where the Spark lines leakproof runs on differ, decided in one place.

leakproof supports pyspark 3.5 (Scala 2.12; the Spark of CDP 7, EMR 6/7, Dataproc 2) and
4.x (Scala 2.13). The DStream API, ``foreachRDD``, the Python workers, ``makeRDD`` with
preferred locations, ``spark.{driver,executor}.defaultJavaOptions``, Hadoop's
``ShutdownHookManager`` and ``launch_gateway(popen_kwargs=...)`` are the same on both. What
differs is reached through the Py4J gateway by class name:

- Scala's Java collection converters: ``scala.jdk.javaapi.CollectionConverters`` exists only
  on Scala 2.13; Scala 2.12 has ``scala.collection.JavaConverters``' explicit methods.
  (Without this, 3.5 could list no executor: ranges lost their preferred executor.)
- Scala's immutable ``Map`` and ``List`` (what ``StreamInputInfo`` takes): built on 2.13 by
  ``Map.from``, on 2.12 by ``toMap`` with an implicit evidence Py4J cannot pass. Spark's own
  ``PythonUtils.toScalaMap`` / ``toList`` (PySpark's helpers, the same signatures on 3.5 and
  4.x) build them on either, so leakproof goes through those.

Everything else that names a Spark class through the gateway goes through this module, so a
third line would be one more case here, not checks spread through the driver.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SUPPORTED = ((3, 5), (4, 0))  # the oldest of each line leakproof runs on


@dataclass(frozen=True)
class SparkLine:
    """One SparkContext's Spark and Scala versions, and what they imply."""

    spark: tuple[int, int]
    scala: tuple[int, int]

    @classmethod
    def of(cls, sc: Any) -> SparkLine:
        scala = str(sc._jvm.scala.util.Properties.versionNumberString())
        return cls(_major_minor(str(sc.version)), _major_minor(scala))

    @property
    def supported(self) -> bool:
        return any(self.spark[0] == major and self.spark >= (major, minor)
                   for major, minor in SUPPORTED)

    def to_java_list(self, jvm: Any, iterable: Any) -> Any:
        """A Scala collection (a Seq, a Set) as a ``java.util.List`` Py4J can iterate."""
        seq = iterable.toList()
        if self.scala >= (2, 13):
            return jvm.scala.jdk.javaapi.CollectionConverters.asJava(seq)
        return jvm.scala.collection.JavaConverters.seqAsJavaList(seq)

    def to_seq(self, jvm: Any, java_list: Any) -> Any:
        """A ``java.util.List`` as a Scala ``Seq`` (what ``makeRDD`` takes)."""
        if self.scala >= (2, 13):
            return jvm.scala.jdk.javaapi.CollectionConverters.asScala(java_list).toSeq()
        return jvm.scala.collection.JavaConverters.asScalaBuffer(java_list).toSeq()

    def to_scala_map(self, jvm: Any, items: dict[str, Any]) -> Any:
        """A Scala immutable ``Map[String, Any]`` of ``items`` (values Py4J can pass)."""
        java_map = jvm.java.util.HashMap()
        for key, value in items.items():
            java_map.put(key, value)
        return jvm.org.apache.spark.api.python.PythonUtils.toScalaMap(java_map)

    def to_scala_list(self, jvm: Any, java_list: Any) -> Any:
        """A ``java.util.List`` as a Scala immutable ``List``."""
        return jvm.org.apache.spark.api.python.PythonUtils.toList(java_list)


def _major_minor(version: str) -> tuple[int, int]:
    parts = version.split(".")
    return int(parts[0]), int(parts[1]) if len(parts) > 1 else 0


_lines: dict[int, SparkLine] = {}


def line(sc: Any) -> SparkLine:
    """``sc``'s line, asked of its JVM once per context."""
    found = _lines.get(id(sc))
    if found is None:
        found = _lines[id(sc)] = SparkLine.of(sc)
    return found

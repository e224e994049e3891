"""A local SparkSession for tests, the bench and the soak: one per run, since starting Spark costs seconds."""

from __future__ import annotations

import os
import re
import sys
from importlib.resources import files
from pathlib import Path

import pyspark
from pyspark.sql import SparkSession

from sharegroup_testing.jars import jar_dir, spark_jars

__all__ = ["QUIET_LOG4J2", "jars_fit_this_spark", "local_spark"]

#: Spark's quiet logging, package data, so an installed wheel has it too; the JVM reads it by path
#: (a wheel installs package data as files).
QUIET_LOG4J2 = Path(str(files("sharegroup_source") / "conf" / "log4j2.properties"))


def jars_fit_this_spark() -> bool:
    """Whether ``make jars`` resolved Delta and Spark's Kafka source for this pyspark's minor version.

    The jars are built for the pinned Spark (jvm/pom.xml); another minor (the compatibility
    venvs of ``make test``) runs without them, since Delta's session extension of another
    Spark fails the session's start.
    """
    wanted = ".".join(pyspark.__version__.split(".")[:2])
    kafka_source = [m.group(1) for jar in jar_dir("spark").glob("spark-sql-kafka-*.jar")
                    if (m := re.search(r"-(\d+\.\d+)\.\d+\.jar$", jar.name))]
    return kafka_source == [wanted]


def _checkpoint_file_manager() -> str:
    """Spark 4.1 moved the class into the ``checkpointing`` package."""
    package = "org.apache.spark.sql.execution.streaming"
    old = tuple(int(part) for part in pyspark.__version__.split(".")[:2]) < (4, 1)
    return f"{package}.FileSystemBasedCheckpointFileManager" if old else \
        f"{package}.checkpointing.FileSystemBasedCheckpointFileManager"


def local_spark(java_options: str = "") -> SparkSession:
    """``local[2]`` with Delta and Spark's Kafka source loaded by path from ``make jars`` when they fit this Spark;
    ``java_options`` go to the driver JVM's command line beside the log configuration."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.master("local[2]").appName("sharegroup-tests")
    if jars_fit_this_spark():
        builder = (builder.config("spark.jars", spark_jars())
                   .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
                   .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog"))
    return (
        builder
        # Delta rebuilds a table's state with 50 tasks by default: seconds per read on two cores
        .config("spark.databricks.delta.snapshotPartitions", "2")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.streaming.stopTimeout", "60s")
        # as conf/spark-defaults.conf: checkpoints without .crc files and FileContext round trips, about
        # 110 ms less of Spark's own time per micro-batch (make bench, 2026-11-23)
        .config("spark.sql.streaming.checkpointFileManagerClass", _checkpoint_file_manager())
        .config("spark.hadoop.fs.file.impl", "org.apache.hadoop.fs.RawLocalFileSystem")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={QUIET_LOG4J2} {java_options}".strip())
        .getOrCreate()
    )

"""A local SparkSession for tests, the bench and the soak: one per run, since starting Spark costs seconds."""

from __future__ import annotations

import os
import sys
from importlib.resources import files
from pathlib import Path

from pyspark.sql import SparkSession

from sharegroup_source.testing.jars import spark_jars

__all__ = ["QUIET_LOG4J2", "local_spark"]

#: Spark's quiet logging, package data, so an installed wheel has it too; the JVM reads it by path
#: (a wheel installs package data as files).
QUIET_LOG4J2 = Path(str(files("sharegroup_source") / "conf" / "log4j2.properties"))


def local_spark() -> SparkSession:
    """``local[2]`` with Delta and Spark's Kafka source loaded by path from ``make jars``."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    return (
        SparkSession.builder.master("local[2]")
        .appName("sharegroup-tests")
        .config("spark.jars", spark_jars())
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        # Delta rebuilds a table's state with 50 tasks by default: seconds per read on two cores
        .config("spark.databricks.delta.snapshotPartitions", "2")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.streaming.stopTimeout", "60s")
        # as conf/spark-defaults.conf: checkpoints without .crc files and FileContext round trips, about
        # 110 ms less of Spark's own time per micro-batch (make bench, 2026-11-23)
        .config("spark.sql.streaming.checkpointFileManagerClass",
                "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager")
        .config("spark.hadoop.fs.file.impl", "org.apache.hadoop.fs.RawLocalFileSystem")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={QUIET_LOG4J2}")
        .getOrCreate()
    )

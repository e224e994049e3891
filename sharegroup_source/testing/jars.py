"""Where the JVM jars resolved by ``make jars`` (``jvm/pom.xml``) live, and how to use them.

Jars are resolved with Maven ahead of time, never at run time (no ``spark.jars.packages``):
``jvm/target/kafka`` holds Apache Kafka's broker and tools, ``jvm/target/spark`` the jars
Spark takes with ``spark.jars`` (Delta and Spark's own Kafka source).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

__all__ = ["JarsMissing", "jar_dir", "java", "kafka_classpath", "spark_jars"]

#: Overrides the folder that holds ``kafka/`` and ``spark/`` (default: the repo's jvm/target).
JARS_ENV = "SHAREGROUP_JARS"
_REPO_JARS = Path(__file__).resolve().parents[2] / "jvm" / "target"


class JarsMissing(RuntimeError):
    """The resolved jars (or the java that runs them) are not on this machine."""


def jar_dir(profile: str) -> Path:
    """The folder of one Maven profile's jars; fails with the command that makes it."""
    folder = Path(os.environ.get(JARS_ENV) or _REPO_JARS) / profile
    if not any(folder.glob("*.jar")):
        raise JarsMissing(f"no jars in {folder}: run `make jars` (mvn resolves jvm/pom.xml) or set {JARS_ENV}")
    return folder


def java() -> str:
    path = shutil.which("java")
    if path is None:
        raise JarsMissing("java not found: Apache Kafka's broker and tools need Java 17 on PATH")
    return path


def kafka_classpath() -> str:
    """Classpath of Apache Kafka's broker, tools and clients (one version, from jvm/pom.xml)."""
    return os.pathsep.join(str(jar) for jar in sorted(jar_dir("kafka").glob("*.jar")))


def spark_jars() -> str:
    """Comma-separated jars for ``spark.jars``: Delta and Spark's Kafka source."""
    return ",".join(str(jar) for jar in sorted(jar_dir("spark").glob("*.jar")))

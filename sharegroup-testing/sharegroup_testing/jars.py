"""Where the JVM jars resolved by ``make jars`` (``jvm/pom.xml``) live, and how to use them.

Jars are resolved with Maven ahead of time, never at run time (no ``spark.jars.packages``):
``jvm/target/kafka`` holds Apache Kafka's broker and tools, ``jvm/target/spark`` the jars
Spark takes with ``spark.jars`` (Delta and Spark's own Kafka source). ``jvm/target/kafka-<version>``
holds the previous Apache Kafka release; ``SHAREGROUP_KAFKA_VERSION=<version>`` runs every broker
and tool of the suite, the bench and ``sharegroup kafka`` on it instead (``jvm/pom.xml`` names both
versions).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

__all__ = ["KAFKA_VERSION_ENV", "JarsMissing", "jar_dir", "java", "kafka_classpath", "kafka_version",
           "spark_jars"]

#: Overrides the folder that holds ``kafka/`` and ``spark/`` (default: the repo's jvm/target).
JARS_ENV = "SHAREGROUP_JARS"
#: The Apache Kafka version to run (``4.3.1``); unset: the default one, in ``kafka/``.
KAFKA_VERSION_ENV = "SHAREGROUP_KAFKA_VERSION"
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


def _kafka_jar_dir() -> Path:
    """The jars of the Apache Kafka that ``SHAREGROUP_KAFKA_VERSION`` names: ``kafka/`` when it holds that
    version (or the variable is unset), else ``kafka-<version>/``."""
    wanted = os.environ.get(KAFKA_VERSION_ENV, "").strip()
    default = jar_dir("kafka")
    if not wanted or any(default.glob(f"kafka_2.13-{wanted}.jar")):
        return default
    folder = default.parent / f"kafka-{wanted}"
    if not any(folder.glob(f"kafka_2.13-{wanted}.jar")):
        raise JarsMissing(f"{KAFKA_VERSION_ENV}={wanted}: no jars of Apache Kafka {wanted} in {folder}; `make jars` "
                          f"resolves the versions jvm/pom.xml names (default: {kafka_version(default)})")
    return folder


def kafka_version(folder: Path | None = None) -> str:
    """The Apache Kafka version the broker and tools run (``4.4.0``): that of ``kafka_2.13-<version>.jar``."""
    jars = sorted((folder or _kafka_jar_dir()).glob("kafka_2.13-*.jar"))
    if len(jars) != 1:
        raise JarsMissing(f"expected one kafka_2.13 jar in {folder or _kafka_jar_dir()}, found {len(jars)}: "
                          "run `make jars`")
    return jars[0].name.removeprefix("kafka_2.13-").removesuffix(".jar")


def kafka_classpath() -> str:
    """Classpath of Apache Kafka's broker, tools and clients (one version, from jvm/pom.xml; see
    :data:`KAFKA_VERSION_ENV`)."""
    return os.pathsep.join(str(jar) for jar in sorted(_kafka_jar_dir().glob("*.jar")))


def spark_jars() -> str:
    """Comma-separated jars for ``spark.jars``: Delta and Spark's Kafka source."""
    return ",".join(str(jar) for jar in sorted(jar_dir("spark").glob("*.jar")))

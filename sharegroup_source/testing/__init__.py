"""Test and demo tooling shipped with the package, never imported by the connector itself.

- :mod:`.jars`: the JVM jars ``make jars`` resolves from ``jvm/pom.xml``.
- :mod:`.apache_kafka`: Apache Kafka's own broker (single-node KRaft) started from those jars.
"""

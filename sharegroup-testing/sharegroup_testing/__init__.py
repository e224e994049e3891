"""sharegroup-testing: the local brokers and test servers, a distribution of its own beside the connector's.

The connector never imports it, and its wheel does not carry it (Spark keeps ``KafkaTestUtils`` in ``src/test``,
delta-rs its fixtures out of its wheel). The suite, ``bench/``, ``soak/`` and ``examples/demo.py`` import it; it
adds ``sharegroup broker`` and ``sharegroup kafka`` to the ``sharegroup`` command (:mod:`.commands`):

- :mod:`.embedded_broker`: librdkafka's mock cluster as a share-group broker, no JVM.
- :mod:`.apache_kafka`: Apache Kafka's own broker (single-node KRaft) started from the jars of ``make jars``.
- :mod:`.kafka_cluster`: three of those brokers, replicated, with the faults of a production cluster.
- :mod:`.jars`: where those jars are.
- :mod:`.kafka_peers`: either broker behind one interface (topics, groups, producing, outages).
- :mod:`.spark`: a local SparkSession with Delta and Spark's Kafka source.
- :mod:`.workers`: the driver-side Python workers of streaming sources, to kill or measure.
- :mod:`.commands`, :mod:`.serve`: a broker served in the foreground (``sharegroup broker``, ``sharegroup kafka``).
- :mod:`.secured_kafka`: Apache Kafka with SASL_SSL, a CA made at start, and ACLs.
- :mod:`.s3_server`, :mod:`.azurite`, :mod:`.gcs_server`: object stores on loopback (moto's S3, Azure's emulator,
  fake-gcs-server behind an XML API front) for state on them, on :mod:`.store_server`'s base (an outage as a block,
  the commits a store stored and refused).
"""

"""Kafka's own message definitions of the share-group admin APIs kafka-python does not ship.

Copied unchanged from kafka-clients 4.3.1 (``common/message/*.json`` in the jar ``make jars``
resolves; ``make messages`` copies them again, and tests/test_admin_protocol.py checks they are
the jar's bytes). kafka-python builds requests and parses responses from these definitions the
way it does from the ones it ships, so no framing is written by hand.
"""

"""A bounded soak: numbered records flow through format("sharegroup") while faults are injected at random.

``python -m soak`` runs it (10 minutes by default); ``tests/test_soak.py`` runs a short one in
``make test``. The end result is a table: faults injected by kind, records produced, in the sink,
lost and duplicated. With an idempotent sink, lost and duplicated must both be zero.
"""

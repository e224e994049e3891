"""The long soak: hours of both coordinators under the cluster's faults, sampled every few minutes.

``python -m soak.long`` (``make soak-long``) runs two lanes in one Spark session on one Kafka: the
broker lane is the soak of soak/run.py (a ``coordinator=broker`` query and its faults), the delta
lane a ``coordinator=delta`` query with a ``DeltaShareConsumer`` worker process in the same Delta
group. Broker kills and restarts hit both. Every interval it samples the processes' memory, the
Delta tables' size, the batch times and the records' fate (intervals.py), then judges whether
anything grew (verdict.py), and writes soak-long.json, soak-long.png and markdown tables.

Modules: processes.py (process resources), footprints.py (Delta tables), batches.py (batch times),
tally.py (records, read as they commit), worker.py and delta_lane.py (the delta lane), run.py (both
lanes and the sampling), intervals.py, verdict.py, plot.py, __main__.py (the command).
"""

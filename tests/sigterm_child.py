"""A driver-side worker as Spark runs it, for tests/test_stream_reader.py.

Like pyspark's streaming source runner it serves the reader until its input ends and calls
``reader.stop()`` in ``finally``; Spark ends it with SIGTERM. Argument: the options as JSON.
"""

from __future__ import annotations

import json
import sys

from pyspark.sql.streaming.datasource import ReadAllAvailable

from sharegroup_source.driver.stream_reader import ShareGroupStreamReader
from sharegroup_source.options import SourceOptions

reader = ShareGroupStreamReader(SourceOptions.parse(json.loads(sys.argv[1])))
try:
    start = reader.initialOffset()
    while reader.latestOffset(start, ReadAllAvailable()) == start:
        pass
    print("holding an epoch", flush=True)
    sys.stdin.read()  # blocked like the runner on its socket
finally:
    reader.stop()

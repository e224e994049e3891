"""The orders job for ``spark-submit``: options from a JSON file, output to a Delta table.

    spark-submit --properties-file conf/spark-defaults.conf \\
        notebooks/spark_submit_job.py conf/sharegroup-options.example.json /lake/orders /lake/checkpoints/orders

Values written ``{{ENV_NAME}}`` in the options file are read from the environment, so
credentials stay out of the file.
"""

import json
import os
import re
import sys

from pyspark.sql import SparkSession

from sharegroup_source.sinks import DeltaBatchWriter


def load_options(path: str) -> dict[str, str]:
    with open(path, encoding="utf-8") as handle:
        raw = json.load(handle)
    return {k: re.sub(r"\{\{(\w+)\}\}", lambda m: os.environ[m.group(1)], str(v)) for k, v in raw.items()}


def main(options_path: str, table_path: str, checkpoint: str) -> None:
    spark = SparkSession.builder.appName("sharegroup-orders").getOrCreate()
    orders = spark.readStream.format("sharegroup").options(**load_options(options_path)).load()
    query = (orders.writeStream.foreachBatch(DeltaBatchWriter(table_path, app_id="orders-job"))
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination()
    print(f"done: {sum(p['numInputRows'] for p in query.recentProgress)} records into {table_path}")


if __name__ == "__main__":
    main(*sys.argv[1:4])

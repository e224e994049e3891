"""The pipeline's definitions: `payments`, a streaming table that reads the share group with format("sharegroup").

spark-pipelines imports this file; the query function runs once, to build the table's plan. The Spark Connect
server runs it, reading the group until what the topic held when the run started is in the table.
"""

import os

from pyspark import pipelines as dp
from pyspark.sql import DataFrame, SparkSession

spark = SparkSession.active()


@dp.table(comment="Payments from the share group, each once")
def payments() -> DataFrame:
    return (spark.readStream.format("sharegroup")
            .option("kafka.bootstrap.servers", os.environ["BOOTSTRAP"])
            .option("kafka.group.id", spark.conf.get("payments.group"))
            .option("subscribe", spark.conf.get("payments.topic"))
            .option("startingOffsets", "earliest")
            .option("stateLocation", spark.conf.get("payments.stateLocation"))
            .load())

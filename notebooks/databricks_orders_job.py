# Databricks notebook source
# MAGIC %md
# MAGIC # orders from a Kafka share group into Delta (Databricks job)
# MAGIC
# MAGIC Runs as a job task on a cluster with the `sharegroup-source` wheel (built from the repository:
# MAGIC `pip wheel --no-deps -w dist .`; it is on no public index) installed as a cluster or job
# MAGIC library, or with `%pip install /Volumes/<catalog>/<schema>/<volume>/sharegroup_source-0.1.0-py3-none-any.whl`
# MAGIC in the notebook. Needs a Databricks Runtime with Apache Spark 4.0 or later (17.3 LTS and later); not tried on
# MAGIC Databricks (Spark 4.0 and Spark Connect are tested locally: docs/versions.md).
# MAGIC Kafka credentials come from a secret scope; the source never prints `kafka.sasl.*` or passwords.
# MAGIC
# MAGIC Job parameters (widgets): `bootstrap`, `group`, `topic`, `state_location`, `checkpoint`, `table`.

# COMMAND ----------

dbutils.widgets.text("bootstrap", "broker1:9092,broker2:9092")  # noqa: F821 - Databricks globals
dbutils.widgets.text("group", "orders-workers")  # noqa: F821
dbutils.widgets.text("topic", "orders")  # noqa: F821
dbutils.widgets.text("state_location", "/Volumes/main/queues/state/orders")  # noqa: F821
dbutils.widgets.text("checkpoint", "/Volumes/main/queues/checkpoints/orders")  # noqa: F821
dbutils.widgets.text("table", "main.queues.orders")  # noqa: F821
param = dbutils.widgets.get  # noqa: F821

# COMMAND ----------

# MAGIC %md
# MAGIC Spark finds `format("sharegroup")` by listing the `pyspark_*` modules once per session, with
# MAGIC `pkgutil`. A `%pip install` into a running session comes after that listing, so the format is
# MAGIC not found (`DATA_SOURCE_NOT_FOUND`) until it is registered. `register` is idempotent: on a
# MAGIC cluster where the wheel is a cluster library (found at session start) it does nothing.

# COMMAND ----------

import sharegroup_source  # noqa: E402

sharegroup_source.register(spark)  # noqa: F821

# COMMAND ----------

username = dbutils.secrets.get("kafka", "username")  # noqa: F821
password = dbutils.secrets.get("kafka", "password")  # noqa: F821

orders = (
    spark.readStream.format("sharegroup")  # noqa: F821
    .option("kafka.bootstrap.servers", param("bootstrap"))
    .option("kafka.group.id", param("group"))
    .option("kafka.security.protocol", "SASL_SSL")
    .option("kafka.sasl.mechanism", "PLAIN")
    .option("kafka.sasl.username", username)
    .option("kafka.sasl.password", password)
    .option("subscribe", param("topic"))
    .option("stateLocation", param("state_location"))
    # the query's own checkpoint: acknowledgements follow Spark's commits; Spark 4.0/4.1 need it
    .option("checkpointLocation", param("checkpoint"))
    .option("maxRecordsPerTrigger", 10_000)
    .option("maxRecordsPerPartition", 2_000)
    .load()
)

# COMMAND ----------

# MAGIC %md
# MAGIC Databricks has delta-spark built in, so the Delta sink is Spark's own. A job run drains
# MAGIC what is queued now and stops (`availableNow`); schedule the job, or use a processing-time
# MAGIC trigger for a continuously running task.

# COMMAND ----------

from pyspark.sql import functions as F  # noqa: E402

parsed = orders.select(
    F.col("key").cast("string").alias("order_id"),
    F.col("value").cast("string").alias("payload"),
    "topic", "partition", "offset", "timestamp", "deliveryCount", "epoch",
)
query = (
    parsed.writeStream.format("delta")
    .option("checkpointLocation", param("checkpoint"))
    .trigger(availableNow=True)
    .toTable(param("table"))
)
query.awaitTermination()

# COMMAND ----------

display(spark.read.format("delta").load(param("state_location") + "/progress"))  # noqa: F821

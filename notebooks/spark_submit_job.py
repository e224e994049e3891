"""The orders job for spark-submit: options from a JSON file, output to a Delta table.

    spark-submit --properties-file conf/spark-defaults.conf \\
        notebooks/spark_submit_job.py conf/sharegroup-options.example.json /lake/orders /lake/checkpoints/orders

Values written {{ENV_NAME}} in the options file are read from the environment, so
credentials stay out of the file; every variable it names must be set (one error lists
those that are not). The job runs Trigger.AvailableNow: it drains the queue and ends.
"""

import argparse
import json
import os
import re
import sys

_VARIABLE = re.compile(r"\{\{(\w+)\}\}")


class MissingVariables(SystemExit):
    """Variables the options file names that the environment does not set."""


def load_options(path: str, environ: "dict[str, str] | None" = None) -> "dict[str, str]":
    """The options of ``path`` with every ``{{NAME}}`` replaced from the environment; one error names
    every unset variable (a bare KeyError on the first one told the user neither the file nor the rest)."""
    environ = dict(os.environ if environ is None else environ)
    with open(path, encoding="utf-8") as handle:
        raw = {str(k): str(v) for k, v in json.load(handle).items()}
    missing = sorted({name for value in raw.values() for name in _VARIABLE.findall(value) if name not in environ})
    if missing:
        raise MissingVariables(f"{path} names environment variables that are not set: {', '.join(missing)}; "
                               f"export them before spark-submit (for example: export {missing[0]}=...)")
    return {k: _VARIABLE.sub(lambda m: environ[m.group(1)], v) for k, v in raw.items()}


def main(options_path: str, table_path: str, checkpoint: str) -> None:
    from pyspark.sql import SparkSession

    from sharegroup_source.sinks import DeltaBatchWriter

    options = load_options(options_path)
    spark = SparkSession.builder.appName("sharegroup-orders").getOrCreate()
    orders = spark.readStream.format("sharegroup").options(**options).load()
    query = (orders.writeStream.foreachBatch(DeltaBatchWriter(table_path, app_id="orders-job"))
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination()
    print(f"done: {sum(p['numInputRows'] for p in query.recentProgress)} records into {table_path}")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="spark-submit ... notebooks/spark_submit_job.py",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("options", help="JSON file of the source's options ({{NAME}} read from the environment)")
    parser.add_argument("table", help="path or URI of the Delta table the orders go to")
    parser.add_argument("checkpoint", help="the query's checkpoint location")
    return parser


if __name__ == "__main__":
    args = _parser().parse_args(sys.argv[1:])
    main(args.options, args.table, args.checkpoint)

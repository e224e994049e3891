"""Packaging for sharegroup-testing: the local brokers and test servers of sharegroup-source, kept out of its wheel.

`make demo` and `make test` install it beside the connector (an editable install of this folder); it adds the
`sharegroup broker` and `sharegroup kafka` commands to the connector's `sharegroup` command (entry points of the
`sharegroup.commands` group), and the suite, the bench, the soak and the demo import its modules.
"""

from setuptools import setup

setup(
    name="sharegroup-testing",
    version="0.1.0",
    description="Local share-group brokers (embedded, Apache Kafka, secured, three nodes) and object-store servers "
                "on loopback, for sharegroup-source's demo, tests and benchmarks",
    python_requires=">=3.10",
    packages=["sharegroup_testing"],
    package_data={"sharegroup_testing": ["py.typed"]},
    install_requires=[
        "sharegroup-source",
        # spark.py's local SparkSession; workers.py finds the Python workers Spark starts
        "pyspark>=4.0,<5",
        "psutil>=5.9,<8",
        # s3_server.py: moto's server is the field's standard S3 stand-in
        "moto[server]>=5.2,<6",
        # azurite.py: Azure's own client creates Azurite's containers (delta-rs does not create them)
        "azure-storage-blob>=12.19,<13",
    ],
    entry_points={"sharegroup.commands": ["broker = sharegroup_testing.commands:add_broker",
                                          "kafka = sharegroup_testing.commands:add_kafka"]},
)

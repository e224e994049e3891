"""Packaging for sharegroup-source: a Spark Structured Streaming source for Kafka share groups."""

from pathlib import Path

from setuptools import find_packages, setup

setup(
    name="sharegroup-source",
    version="0.1.0",
    description="spark.readStream.format('sharegroup'): Kafka share groups (KIP-932) as a Spark streaming source",
    long_description=Path("README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    classifiers=[
        "Programming Language :: Python :: 3.10",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
        "Programming Language :: Python :: 3.13",
    ],
    packages=find_packages(include=["sharegroup_source", "sharegroup_source.*", "state_store", "state_store.*"]),
    py_modules=["pyspark_sharegroup"],
    # Spark's quiet logging for the local sessions of sharegroup_testing (and conf/spark-defaults.conf)
    # and Kafka's message definitions of the share-group admin APIs kafka-python does not ship; py.typed (PEP 561):
    # both packages are typed, so a type checker reads their annotations
    package_data={"sharegroup_source": ["py.typed", "conf/log4j2.properties", "kafka/messages/*.json"],
                  "state_store": ["py.typed"]},
    # No pyspark: Databricks and spark-submit bring their own Spark, and a pyspark from an index would
    # shadow it. `import sharegroup_source.source` checks the running Spark (sharegroup_source.check_spark);
    # the `spark` extra brings one for local use.
    install_requires=[
        "confluent-kafka>=2.16,<3",
        # Kafka's share-group admin protocol (describe, reset, delete share groups), which confluent-kafka lacks:
        # kafka-python builds requests from Kafka's own message definitions; 3.0.12 is the version checked
        "kafka-python>=3.0.12,<3.1",
        "deltalake>=1.6,<2",
        "pyarrow>=15,<30",
        "pandas>=2.2,<3",
        "numpy>=1.26,<3",
    ],
    extras_require={
        # a local Spark: 4.0 to 4.3 are supported (4.0, 4.1: with the source option checkpointLocation)
        "spark": ["pyspark>=4.0,<5"],
        # Spark Connect's client (SparkSession.builder.remote): pyspark's own connect extra
        "connect": ["pyspark[connect]>=4.0,<5"],
        "test": [
            # below 9: pytest-xdist 3.8 (the newest) names a test's group in its nodeid, which pytest 9 builds anew, so
            # --dist loadgroup groups nothing there and a costly broker fixture starts on every worker
            "pytest>=8.4,<9",
            "pytest-timeout>=2.3,<3",
            # the suite in two workers (make test): most of its time is spent waiting on brokers, locks and Spark
            "pytest-xdist>=3.8,<4",
            "chispa>=0.10,<1",
            "ruff>=0.6",
            # the type checker make test runs over sharegroup_source/ and state_store/ (pyproject.toml)
            "mypy>=1.11,<3",
            "nbclient>=0.10,<1",
            "nbformat>=5.10,<6",
            "ipykernel>=6.29,<8",
            "matplotlib>=3.8,<4",
            "psutil>=5.9,<8",
            # the needs of sharegroup-testing (sharegroup-testing/setup.py), installed beside it without its own:
            # S3 for the state store's tests, moto's server being the field's standard S3 stand-in (s3_server.py)
            "moto[server]>=5.2,<6",
            # Azure's own client, to create Azurite's containers (delta-rs does not create them; azurite.py)
            "azure-storage-blob>=12.19,<13",
            # tests/test_install.py builds the wheel offline (--no-build-isolation): setuptools < 70.1 needs it
            "wheel>=0.40",
            # The Spark the suite runs: 4.2.0, the newest one Delta ships jars for (delta-spark_4.2_2.13
            # 4.4.0 in jvm/pom.xml; delta-spark 4.4 on PyPI caps pyspark at 4.2.0).
            # [connect]: tests/test_spark_connect.py runs the source through a Spark Connect session
            "pyspark[connect]==4.2.0",
            "delta-spark==4.4.0",
            # make check builds the documentation site and tests/test_docs.py opens it: the docs extra's pins
            "mkdocs>=1.6,<2",
            "mkdocs-material>=9.8,<10",
            "mkdocstrings>=1.0,<2",
            "mkdocstrings-python>=2.0,<3",
            # tests/browser.py drives Chromium over its DevTools protocol with tornado's websocket client, until now
            # only here through ipykernel: named so that the browser tests do not hang on another package's needs
            "tornado>=6.4,<7",
        ],
        "delta-spark": ["delta-spark==4.4.0"],
        # the documentation site (mkdocs.yml; `mkdocs serve`, `mkdocs build --strict`)
        "docs": [
            # mkdocs 1.6: its `validation` settings make broken links and anchors warnings, errors under --strict
            "mkdocs>=1.6,<2",
            # the theme, with its search; 9.8 is the version checked
            "mkdocs-material>=9.8,<10",
            # the API reference from the docstrings: mkdocstrings 1.0 and its Python handler 2.0 (1.0.8, 2.0.11 checked)
            "mkdocstrings>=1.0,<2",
            "mkdocstrings-python>=2.0,<3",
        ],
        # the compatibility slice's venvs (make compat): pytest only; the Makefile adds pyspark[connect]==<version>
        "compat-test": ["pytest>=8,<10", "pytest-timeout>=2.3,<3", "psutil>=5.9,<8"],
    },
    entry_points={"console_scripts": ["sharegroup=sharegroup_source.cli:main"]},
)

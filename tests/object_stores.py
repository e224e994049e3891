"""Object-store servers on loopback, each started once per test session: moto's S3, Azurite and fake-gcs-server.

Test modules import the fixtures they use (``from tests.object_stores import azurite, s3_server  # noqa:
F401``) rather than finding them in conftest.py, so that a run without those modules starts none.
The servers are shared by every test of the session: take a fresh bucket or container per test
(``create_bucket()``, ``create_container()`` with no name), and leave authentication and outages as
they were (``credentials_required()``, ``outage()`` are context managers).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sharegroup_testing.azurite import Azurite
from sharegroup_testing.gcs_server import GcsServer
from sharegroup_testing.s3_server import S3Server

__all__ = ["azurite", "gcs_server", "s3_server"]


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """moto's S3 in a child process, writes serialised (sharegroup_testing.s3_server): about 2 s to start."""
    with S3Server() as server:
        yield server


@pytest.fixture(scope="session")
def azurite() -> Iterator[Azurite]:
    """Azurite's Blob service (``make tools`` installs it): about 2 s to start."""
    with Azurite() as server:
        yield server


@pytest.fixture(scope="session")
def gcs_server() -> Iterator[GcsServer]:
    """fake-gcs-server behind its XML API front (sharegroup_testing.gcs_server; ``make gcs`` builds it)."""
    with GcsServer() as server:
        yield server

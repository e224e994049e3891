"""Quiet by default: an s3:// location without region or credentials is one line from the connector.

The AWS SDK inside delta-rs looks the region and credentials up through the EC2 instance metadata
service (IMDS) and warned about each failed lookup before the connector's own error. The child
process points IMDS at a closed port on loopback, so the lookups fail at once and nothing leaves
this machine.
"""

from __future__ import annotations

import os
import subprocess
import sys

CHECK = """
from sharegroup_source.errors import OptionError
from sharegroup_source.locations import check_location
try:
    check_location("stateLocation", "s3://sharegroup-no-such-bucket/state", {})
except OptionError as error:
    print(error)
"""


def test_an_s3_location_without_credentials_is_one_line_and_nothing_else() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_") and k != "RUST_LOG"}
    env.update(AWS_EC2_METADATA_SERVICE_ENDPOINT="http://127.0.0.1:1", HOME=os.environ.get("HOME", "/root"))
    child = subprocess.run([sys.executable, "-c", CHECK], env=env, capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr
    assert child.stderr == "", f"third-party output before the connector's error:\n{child.stderr[:2000]}"
    assert child.stdout.splitlines() == [
        "option 'stateLocation': s3://sharegroup-no-such-bucket/state: access denied or no credentials: check the "
        "storage options (stateStorage.*) (no credentials found in the store's credential chain)"], child.stdout

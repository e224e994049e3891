"""Arrow's memory pool in the process that runs the driver: one that gives freed pages back.

The driver-side runner lives as long as its query, and each batch allocates small Arrow buffers in
several threads (Spark's calls, the commit watcher, maintenance, pyarrow's readers of the state's
files). pyarrow's default pool, mimalloc, kept what they freed: over the fifth 2-hour soak
(2026-11-29) its region in the delta lane's runner grew 9 to 68 MB while Arrow had 1-2 MB allocated,
and ``release_unused`` gave back 11 MB of it. The driver's state work alone, 3,000 epochs
(2026-11-29): mimalloc's region 10 to 35 MB (25 MB with ``release_unused`` after every round and
every 50 epochs); under the jemalloc pool, which returns freed pages to the system, the process's
anonymous memory outside glibc's and pymalloc's arenas stayed at 64-68 MB over 2,000 epochs, with
no mimalloc region at all.

A pool chosen with ``ARROW_DEFAULT_MEMORY_POOL`` is left alone, as is a pyarrow built without
jemalloc (its default then stays).
"""

from __future__ import annotations

import logging
import os

import pyarrow as pa

__all__ = ["POOL_VARIABLE", "use_a_returning_pool"]

log = logging.getLogger(__name__)

#: Arrow's own way of choosing the pool: set, it wins over this module.
POOL_VARIABLE = "ARROW_DEFAULT_MEMORY_POOL"


def use_a_returning_pool() -> str:
    """Make jemalloc Arrow's default pool in this process unless the user chose one; the pool's name now."""
    if not os.environ.get(POOL_VARIABLE):
        try:
            pa.set_memory_pool(pa.jemalloc_memory_pool())
        except NotImplementedError:
            log.info("this pyarrow has no jemalloc pool: Arrow's default pool stays %s",
                     pa.default_memory_pool().backend_name)
    return pa.default_memory_pool().backend_name

"""Arrow's memory pool in the process that runs the driver: one that gives freed pages back.

The driver-side runner lives as long as its query, and each batch allocates small Arrow buffers in
several threads (Spark's calls, the commit watcher, maintenance, pyarrow's readers of the state's
files). pyarrow's default pool, mimalloc, kept what they freed: over the fifth 2-hour soak
(2026-11-29) its region in the delta lane's runner grew 9 to 68 MB while Arrow had 1-2 MB allocated,
and ``release_unused`` gave back 11 MB of it. The driver's state work alone (2026-11-29): mimalloc's
region 10 to 19 MB over epochs 500 to 1,500 and 35 MB at 3,000; with this pool set, 10 to 11 MB over
the same 1,000 epochs. ``set_memory_pool`` sets pyarrow's default, which pyarrow's own calls use;
Arrow's C++ readers underneath still take Arrow's process default, which only
``ARROW_DEFAULT_MEMORY_POOL`` chooses, before Arrow first allocates (with it set to jemalloc the
same loop kept no mimalloc region at all).

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

"""The Spark engine end to end: the local engine's 10M-row job, and the ratio between them.

Same data and model as ``e2e_local.py`` (the demo model, 1M rows per Parquet file); each
run in its own process.  The Spark run includes starting a local[*] session (JVM and
Python workers), as a scheduled job would.

    python benchmarks/e2e_spark.py [--rows 10000000]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from e2e_local import engine_main

if __name__ == "__main__":
    engine_main("spark", doc=__doc__ or "", note="Spark: a local[*] session started by the job.")

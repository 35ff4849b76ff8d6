"""Floor 5, a front end: the data pipeline on Spark (`streamdump spark`), for captures too big
for one process, as Parquet tables.

pyspark is an optional extra (`pip install 'streamdump[spark]'`); `missing()` says in one
line what a machine lacks before anything starts, and `session()` starts Spark locally
(embedded, `local[*]`) or joins the one spark-submit started.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from typing import Any

# PySpark 4 runs on Java 17 and newer.
JAVA_MAJOR = 17
# The master URLs Spark 4 takes (it refuses others with a Java stack trace).
MASTER = re.compile(r"local(\[(\d+|\*)(,\d+)?\])?|spark://\S+|yarn|k8s://\S+|local-cluster\[\d+,\d+,\d+\]")
# Spark's own logging, errors only: a run's stderr is streamdump's lines and the progress bar.
LOG_CONFIG = os.path.join(os.path.dirname(__file__), "log4j2.properties")


def missing() -> str | None:
    """What this machine lacks to run the pipeline, in one line; None when nothing."""
    try:
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as exc:
        return f"the Spark pipeline needs {exc.name}: pip install 'streamdump[spark]'"
    java = os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else None
    java = java if java and os.path.exists(java) else shutil.which("java")
    if java is None:
        return (
            f"the Spark pipeline needs Java {JAVA_MAJOR} or newer "
            "(e.g. apt-get install openjdk-17-jre-headless)"
        )
    try:
        shown = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30).stderr
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"the Spark pipeline needs Java {JAVA_MAJOR} or newer; {java} -version failed: {exc}"
    found = re.search(r'version "(\d+)(?:\.(\d+))?', shown)
    if found is None:
        return f"the Spark pipeline needs Java {JAVA_MAJOR} or newer; {java} -version says {shown.strip()!r}"
    major = int(found.group(1)) if found.group(1) != "1" else int(found.group(2) or 0)
    if major < JAVA_MAJOR:
        return f"the Spark pipeline needs Java {JAVA_MAJOR} or newer; {java} is Java {major}"
    return None


def session(master: str | None, driver_memory: str, partitions: int, progress: bool) -> Any:
    """A Spark session: spark-submit's when it started this process, else an embedded local one."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("streamdump")
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # spark-submit hands its JVM over this way
    if not submitted:
        # Workers run this interpreter, the one streamdump is installed in.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        # An embedded run talks to itself: no warning about which address the host name has.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = builder.master(master or "local[*]").config("spark.driver.memory", driver_memory)
        builder = builder.config("spark.ui.enabled", "false")
        # Logging quiet; and the JIT's quick tier only: the JVM here moves bytes between Python
        # tasks, and its optimising compiler cost more CPU than it saved (-8 s of about 19 on
        # 250 MB, -2.5 s wall).
        java = f"-Dlog4j2.configurationFile={LOG_CONFIG} -XX:TieredStopAtLevel=1"
        builder = builder.config("spark.driver.extraJavaOptions", java)
    elif master:
        builder = builder.master(master)
    from streamdump.spark.job import ARROW_BATCH_ROWS

    spark = (
        builder.config("spark.sql.shuffle.partitions", str(partitions))
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", str(ARROW_BATCH_ROWS))
        .config("spark.ui.showConsoleProgress", "true" if progress else "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark

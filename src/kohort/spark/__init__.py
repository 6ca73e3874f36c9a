"""kohort's PySpark data source: `import kohort.spark; kohort.spark.register(spark)` makes
`format("kohort")` available to spark.read, spark.readStream, df.write and df.writeStream, with
spark-sql-kafka's options and schema (see `kohort.spark.options` and `kohort.spark.arrow`).

`register` also ships kohort to the Python workers (`package_zip()` + `SparkContext.addPyFile`), so
executors whose Python lacks kohort can still import it: Spark puts a pyfile on the sys.path of every
Python worker it starts -- the planner workers on the driver as well as the executors' workers --
before it unpickles the data source. The zip holds kohort's Python modules; an extension module
cannot be imported from a zip, so the compiled record decoder (when built) travels next to it
(`SparkContext.addFile`) and this package, imported from the zip on a worker, adds the zip's
directory to `kohort.protocol.__path__` before the record code is imported. A worker whose platform
cannot load it falls back to the Python decoder. Workers still need kohort's third-party
dependencies: pyarrow, crc32c, lz4, cramjam (README, "Spark"). When the workers run this
very interpreter (local mode with PYSPARK_PYTHON pointing at it) nothing is shipped.

PySpark 4.0 to 4.3 and pyarrow come with the `spark` extra (`pip install 'kohort[spark]'`); without
them importing this package raises ModuleNotFoundError with that one line, and the rest of kohort
(client, broker, CLI) works as before. `kohort.spark.compat` bridges the PySpark releases.

Modules: options (parsing/validation), planning (pure offset-range planning, admission control,
data-loss classification), arrow (schema, Arrow batches from fetched record batches), wire (the small
blocking client the source uses), source (DataSource, batch/stream readers), sink (writers),
pipeline (the ready JSON-events -> windowed aggregates -> Parquet job).
"""
from __future__ import annotations

import hashlib
import io
import os
import shutil
import sys
import tempfile
import zipfile
from typing import Any

FORMAT = "kohort"
INSTALL_HINT = "pip install 'kohort[spark]'"


def _require_spark() -> None:
    """Fail the import of kohort.spark with one line when PySpark or pyarrow is missing."""
    for module in ("pyspark", "pyarrow"):
        try:
            __import__(module)
        except ImportError:
            raise ModuleNotFoundError(f"kohort.spark needs {module} (PySpark 4.0-4.3 and pyarrow): "
                                      f"{INSTALL_HINT}", name=module) from None


_require_spark()


def register(spark: Any, ship: bool | None = None) -> None:
    """Register the `kohort` format with a SparkSession and make its Python workers able to import
    kohort. `ship`: True = always add kohort's zip to the session, False = never (kohort is
    installed where the workers run), None (default) = unless the workers run this interpreter
    (a Spark Connect session: never, its server's workers must have kohort installed)."""
    try:
        sc = spark.sparkContext
    except Exception:                   # noqa: BLE001 - a Spark Connect session has no SparkContext
        sc = None
    KohortDataSource = data_source_class(_default_parallelism(spark, sc))
    if sc is None:
        if ship:
            from kohort.errors import ConfigError
            raise ConfigError("kohort cannot ship itself through a Spark Connect session: install kohort "
                              "where the server's Python workers run and call register(spark, ship=False)")
        ship = False
    elif ship is None:
        ship = not _workers_run_this_python(sc)
    if not ship:
        spark.dataSource.register(KohortDataSource)
        return
    path = package_zip()
    _add_py_file(sc, path)
    for name in os.listdir(os.path.dirname(path)):
        if name.startswith("_crecords."):
            _add_file(sc, os.path.join(os.path.dirname(path), name))
    # The registered data source carries the context's pyfiles. Spark's streaming-source runner (on
    # the driver) looks them up in a per-job subdirectory of its files root where they are not
    # (pyspark 4.2), so the data source also lists the zip by absolute path: os.path.join keeps an
    # absolute name, the driver's workers find it there, executors elsewhere skip a missing entry.
    sc._python_includes.append(path)
    try:
        spark.dataSource.register(KohortDataSource)
    finally:
        sc._python_includes.remove(path)


def data_source_class(default_parallelism: int | None) -> type:
    """`KohortDataSource` carrying a session's default parallelism (None: one Spark partition per
    Kafka partition unless minPartitions / maxRecordsPerPartition say otherwise). The subclass is
    made here, not importable by name, so Spark's cloudpickle ships it by value, attribute included,
    to the Python workers that plan and read."""
    from kohort.spark.source import KohortDataSource as Base
    if not default_parallelism:
        return Base

    class KohortDataSource(Base):
        __doc__ = Base.__doc__
    KohortDataSource.default_parallelism = int(default_parallelism)
    return KohortDataSource


def _default_parallelism(spark: Any, sc: Any) -> int | None:
    """The session's default parallelism: SparkContext.defaultParallelism; through Spark Connect
    (no SparkContext) `spark.default.parallelism` when the server lets it be read, else None."""
    try:
        if sc is not None:
            return int(sc.defaultParallelism)
        value = spark.conf.get("spark.default.parallelism", None)
        return int(value) if value else None
    except Exception:                   # noqa: BLE001 - unknown: keep one task per Kafka partition
        return None


def _workers_run_this_python(sc) -> bool:
    """True when Spark starts its Python workers with this interpreter on this machine: a local
    master, and the Python Spark picks for its workers (spark.pyspark.python, PYSPARK_PYTHON, else
    `python3` from PATH; spark.pyspark.driver.python / PYSPARK_DRIVER_PYTHON if set) is in the
    directory of sys.executable (the same virtualenv)."""
    if not sc.master.startswith("local"):
        return False
    conf = sc.getConf()
    names = [conf.get("spark.pyspark.python") or os.environ.get("PYSPARK_PYTHON") or "python3",
             conf.get("spark.pyspark.driver.python") or os.environ.get("PYSPARK_DRIVER_PYTHON")]
    here = os.path.dirname(os.path.abspath(sys.executable))
    for n in filter(None, names):
        path = shutil.which(n)
        if path is None or os.path.dirname(os.path.abspath(path)) != here:
            return False
    return True


def _add_py_file(sc, path: str) -> None:
    """SparkContext.addPyFile once per context, without leaving the zip on the driver's sys.path
    (the driver already imports kohort, with its compiled decoder)."""
    name = os.path.basename(path)
    if name in sc._python_includes:
        return
    before = list(sys.path)
    sc.addPyFile(path)
    sys.path[:] = before


def _add_file(sc, path: str) -> None:
    name = os.path.basename(path)
    if not any(os.path.basename(uri) == name for uri in sc.listFiles):
        sc.addFile(path)


def _compiled_decoder() -> str | None:
    """The file of kohort's compiled record decoder, if this interpreter has it."""
    try:
        from kohort.protocol import _crecords
    except ImportError:
        return None
    return getattr(_crecords, "__file__", None)


def package_zip(directory: str | None = None) -> str:
    """A zip of kohort's Python modules, content-addressed and built once per version of the code,
    in a directory of its own that also holds a copy of the compiled record decoder (if built);
    returns the zip's path."""
    import kohort
    root = os.path.dirname(os.path.abspath(kohort.__file__))
    base = os.path.dirname(root)
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        files.extend(os.path.join(dirpath, f) for f in sorted(filenames) if f.endswith((".py", ".typed")))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for f in files:
            info = zipfile.ZipInfo(os.path.relpath(f, base), date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            with open(f, "rb") as fh:
                zf.writestr(info, fh.read())
    data = buf.getvalue()
    ext = _compiled_decoder()
    ext_data = b""
    if ext:
        with open(ext, "rb") as fh:
            ext_data = fh.read()
    name = f"kohort-{hashlib.sha256(data + ext_data).hexdigest()[:16]}"
    folder = os.path.join(directory or os.path.join(tempfile.gettempdir(), "kohort-spark"), name)
    os.makedirs(folder, exist_ok=True)
    for fname, content in ((os.path.basename(ext) if ext else None, ext_data), (name + ".zip", data)):
        target = os.path.join(folder, fname) if fname else None
        if target and not os.path.exists(target):
            tmp = f"{target}.{os.getpid()}.tmp"
            with open(tmp, "wb") as fh:
                fh.write(content)
            os.replace(tmp, target)
    return os.path.join(folder, name + ".zip")


def _find_shipped_decoder() -> None:
    """On a Python worker that imports kohort from the shipped zip: let `kohort.protocol` also look in
    the zip's directory, where the compiled decoder was shipped. Runs when this package is imported,
    which on a worker is before any record code (unpickling the data source imports kohort.spark.*)."""
    import kohort
    f = getattr(kohort, "__file__", None) or ""
    marker = ".zip" + os.sep
    if marker not in f or "kohort.protocol.records" in sys.modules:
        return
    where = os.path.dirname(f[:f.index(marker) + 4])
    import kohort.protocol
    if where not in kohort.protocol.__path__:
        kohort.protocol.__path__.append(where)


_find_shipped_decoder()


__all__ = ["FORMAT", "INSTALL_HINT", "package_zip", "register"]

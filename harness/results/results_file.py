"""A results file's connections: only a regular DuckDB file is opened, never with a DuckDB
extension; a locked file is retried; a file an older version wrote is upgraded on first use;
a file deleted while a run writes it is put back, never replaced by an empty one."""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import duckdb

from harness.results.schema import (
    MIGRATIONS,
    NO_EXTENSIONS,
    SCHEMA,
    SCHEMA_VERSION,
    STAMP,
    UnknownVersion,
    file_version,
    has_schema,
    outdated,
)


class StoreError(RuntimeError):
    """The results file cannot be used; the message is one sentence for the user."""


_DUCKDB_MAGIC = b"DUCK"  # bytes 8-11 of every DuckDB database file
HEADER_WAIT_S = 2.0  # measured: a new file had its header in 0.15 ms, 8 ms beside busy processes
# (device, inode) of the files seen to start as DuckDB files: each is read once a process, as
# closing any descriptor on a file drops every lock the process holds on it, DuckDB's too
_DUCKDB_FILES: set[tuple[int, int]] = set()


def _inode(path: str | os.PathLike) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


def _head(path: Path) -> bytes:
    """The file's first 12 bytes. DuckDB creates a file some milliseconds before it writes
    the header, so an empty file may be one another process is creating this moment: it is
    read again until the header comes, for up to HEADER_WAIT_S."""
    deadline = time.monotonic() + HEADER_WAIT_S
    while True:
        with open(path, "rb") as f:
            head = f.read(12)
        if head or time.monotonic() > deadline:
            return head
        time.sleep(0.005)


def check_file(path: Path) -> tuple[int, int] | None:
    """Refuse, before DuckDB sees it, a path that holds something other than a DuckDB file
    (StoreError): opening a pipe or a device would block or read without end, and DuckDB
    hands a SQLite file to an extension. The file's (device, inode); None where there is
    none (it is created, or reads as holding no runs)."""
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise StoreError(f"{path} is not a regular file")
        found = st.st_dev, st.st_ino
        if found in _DUCKDB_FILES:
            return found
        head = _head(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StoreError(f"cannot open {path}: {exc.strerror}") from None
    if head[8:12] != _DUCKDB_MAGIC:
        raise StoreError(f"{path} is not a DuckDB results file")
    _DUCKDB_FILES.add(found)
    return found


def connect(path: str | os.PathLike, read_only: bool = False,
            create: bool = True) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection to a results file that can neither load nor download an extension;
    StoreError for a path that holds no DuckDB file (check_file), or none at all unless a
    write may `create` it: a file deleted meanwhile would come back empty, also when it goes
    while DuckDB opens it (~10 ms), which leaves a new file in its place, removed here."""
    gone = StoreError(f"the results file {path} was deleted or moved while in use")
    found = check_file(Path(path))
    if found is None and not (read_only or create):
        raise gone
    con = duckdb.connect(str(path), read_only=read_only, config=dict(NO_EXTENSIONS))
    if read_only or found is None or _inode(path) == found:
        return con
    made = not has_schema(con)
    con.close()
    if made:
        with contextlib.suppress(OSError):
            os.unlink(path)
    raise gone


class ResultsFile:
    """Short connections to the results file at `path` (created with its schema on first
    use); `Store` reads and writes the results through them."""

    def __init__(self, path: str | os.PathLike, lock_timeout_s: float = 60.0,
                 stopped: Callable[[], object] | None = None):
        """`stopped()`: true once the process is asked to stop; a wait for another process's
        lock then gives up at once (KeyboardInterrupt), as a stop must not wait it out."""
        self.path = Path(path)
        self.lock_timeout_s = lock_timeout_s
        self._stopped = stopped
        self._upgraded = False
        self._held: int | None = None  # a descriptor on the file while a run writes it
        # an outdated file this process may not write, upgraded in memory: what it reads
        self._copy: duckdb.DuckDBPyConnection | None = None

    def initialise(self) -> None:
        """Create the folder and schema; refuse an unwritable path with one sentence."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the folder for {self.path}: {exc.strerror}") from None
        if self.path.exists() and not os.access(self.path, os.W_OK):
            raise StoreError(f"the results file {self.path} is not writable")
        if not os.access(self.path.parent, os.W_OK):
            raise StoreError(f"the folder {self.path.parent} is not writable")
        with self._connect(create=True) as con:  # one transaction: a stop leaves all or none
            con.execute("BEGIN")
            con.execute(SCHEMA)
            con.execute(STAMP)
            con.execute("COMMIT")

    def _open(self, read_only: bool, create: bool = False) -> duckdb.DuckDBPyConnection:
        deadline = time.monotonic() + self.lock_timeout_s
        delay = 0.02
        while True:
            try:
                con = connect(self.path, read_only=read_only, create=create)
            except duckdb.IOException as exc:
                if "lock" not in str(exc).lower() or time.monotonic() > deadline:
                    reason = str(exc).splitlines()[0]
                    raise StoreError(f"cannot open {self.path}: {reason}") from None
                if self._stopped is not None and self._stopped():
                    raise KeyboardInterrupt from None
                time.sleep(delay)
                # tried again often: a reader that polls (a test, `watch summary`) holds
                # the file for ~20 ms at a time, and a writer must find a gap between
                delay = min(delay * 2, 0.1)
            except duckdb.Error as exc:
                raise StoreError(f"cannot open {self.path}: {str(exc).splitlines()[0]}") from None
            else:
                # DuckDB draws a progress bar on stdout for any query past 2 s, which would
                # corrupt `--json` output and CSV written to stdout.
                con.execute("SET enable_progress_bar = false")
                return con

    @contextlib.contextmanager
    def _connect(self, read_only: bool = False,
                 create: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        """A short connection; the first one of this Store upgrades a file an older version
        wrote (briefly opening it for writing when a reader found it outdated) and refuses
        one a newer version wrote. Only `create` writes where no file is: a write elsewhere
        would leave an empty file in the place of one deleted meanwhile."""
        try:
            with self._connection(read_only, create) as con:
                yield con
        except RuntimeError as exc:  # DuckDB turns a signal handler's exception into this
            if str(exc) == "Query interrupted":
                raise KeyboardInterrupt from None
            raise

    @contextlib.contextmanager
    def _connection(self, read_only: bool,
                    create: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        if read_only and self._copy is not None:
            con = self._copy.cursor()
        else:
            con = self._open(read_only, create)
        try:
            if not self._upgraded:
                try:
                    version = file_version(con)
                except UnknownVersion as exc:
                    raise StoreError(f"{self.path} is not a results file engram-bench can "
                                     f"read: its schema_version table {exc}") from None
                if version > SCHEMA_VERSION:
                    raise StoreError(f"{self.path} was written by a newer engram-bench (schema "
                                     f"version {version}, this one knows up to "
                                     f"{SCHEMA_VERSION}): upgrade engram-bench to open it")
                if outdated(con):
                    if read_only and not self._writable():
                        con.close()
                        self._copy = self._upgraded_copy()
                        con = self._copy.cursor()
                    elif read_only:
                        con.close()
                        writer = self._open(read_only=False)
                        try:
                            self._upgrade(writer)
                        finally:
                            writer.close()
                        con = self._open(read_only=True)
                    else:
                        self._upgrade(con)
                self._upgraded = True
            try:
                yield con
            except (duckdb.IOException, duckdb.FatalException,
                    duckdb.TransactionException) as exc:  # a full disk, say (at commit)
                verb = "read" if read_only else "written"
                raise StoreError(f"{self.path} could not be {verb}: "
                                 f"{str(exc).splitlines()[0]}") from None
            except duckdb.CatalogException:
                with contextlib.suppress(duckdb.Error):
                    con.execute("ROLLBACK")
                if read_only or create or has_schema(con):
                    raise
                raise StoreError(f"the results file {self.path} holds no results tables: it "
                                 "was deleted or replaced while in use") from None
        finally:
            con.close()

    def _writable(self) -> bool:
        """Whether this process may write the file and its folder (DuckDB writes a journal
        beside it): not on a read-only mount, nor, unless root, where the modes forbid it."""
        return os.access(self.path, os.W_OK) and os.access(self.path.parent, os.W_OK)

    def _upgraded_copy(self) -> duckdb.DuckDBPyConnection:
        """The file copied into memory and upgraded there, for reading a file an older version
        wrote that this process may not write: the file is left as it is."""
        quoted = str(self.path).replace("'", "''")
        copy = duckdb.connect(":memory:", config=dict(NO_EXTENSIONS))
        try:
            copy.execute(f"ATTACH '{quoted}' AS original (READ_ONLY)")
            copy.execute("COPY FROM DATABASE original TO memory")
            copy.execute("DETACH original")
        except duckdb.Error as exc:
            copy.close()
            raise StoreError(f"cannot read {self.path}, written by an older engram-bench, "
                             f"into memory: {str(exc).splitlines()[0]}") from None
        copy.execute("SET enable_progress_bar = false")
        self._upgrade(copy)
        return copy

    def _upgrade(self, con: duckdb.DuckDBPyConnection) -> None:
        try:
            con.execute("BEGIN")
            con.execute(MIGRATIONS)
            con.execute("COMMIT")  # a unique index sees the duplicates' deletion only after it
            con.execute("BEGIN")
            con.execute(SCHEMA)  # the views again, with today's columns, and the index
            con.execute(STAMP)
            con.execute("COMMIT")
        except duckdb.Error as exc:
            raise StoreError(f"cannot upgrade {self.path}, written by an older engram-bench: "
                             f"{str(exc).splitlines()[0]}") from None

    @contextlib.contextmanager
    def run_lock(self, run_id: str) -> Iterator[None]:
        """Held while a run is measured, so one run has one writer: a second process that
        resumes it meanwhile is refused. A byte-range lock beside the file, one byte per run
        id; the kernel drops a dead process's locks, so a resume after a crash takes over."""
        path = self.path.with_name(self.path.name + ".runs.lock")
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StoreError(f"cannot open {path}: {exc.strerror}") from None
        try:
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, zlib.crc32(run_id.encode()))
            except OSError:
                raise StoreError(f"run {run_id} is being measured by another engram-bench "
                                 "process: let it finish, or stop it, before resuming") from None
            yield
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def held_open(self) -> Iterator[None]:
        """Keep a descriptor on the file while a run writes it: the kernel keeps a deleted
        file's data while one is open, so `put_back` can restore what was stored."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError as exc:
            raise StoreError(f"cannot open {self.path}: {exc.strerror}") from None
        self._held = fd
        try:
            yield
        finally:
            self._held = None
            os.close(fd)

    def put_back(self) -> bool:
        """Restore the file held open at its path if it was deleted (not moved away, and
        nothing new in its place); True when it was. Call it with no connection open."""
        fd = self._held
        if fd is None or os.fstat(fd).st_nlink or os.path.lexists(self.path):
            return False
        part = self.path.with_name(f".{self.path.name}.restoring")
        try:
            with open(part, "wb") as out:
                offset = 0
                while sent := os.sendfile(out.fileno(), fd, offset, 2**30):
                    offset += sent
                out.flush()
                os.fsync(out.fileno())
            os.link(part, self.path)  # never over a file made there meanwhile
        except OSError:
            return False
        finally:
            part.unlink(missing_ok=True)
        return True

    def read_only(self) -> contextlib.AbstractContextManager[duckdb.DuckDBPyConnection]:
        """A short read-only connection (retried while a writer holds the file)."""
        return self._connect(read_only=True)

    def _query(self, sql: str, params: Sequence[object] = ()) -> list[dict]:
        if not self.path.exists():
            return []
        with self._connect(read_only=True) as con:
            try:
                cur = con.execute(sql, list(params))
            except duckdb.CatalogException:
                if has_schema(con):
                    raise
                return []  # a file a stopped run created before its schema: holds nothing
            names = [d[0] for d in cur.description]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

"""The run's SQLite checkpointer, storing each channel value once per version.

LangGraph's SqliteSaver writes the whole state into every checkpoint row, so a run's file grew by a
full copy of the conversation after every node (7.5 MB for an 8-turn run whose trajectory is 0.8 MB).
This saver keeps the checkpoint rows without their values and puts each value in `channel_values`
keyed by (thread, namespace, channel, version): a node that changes one channel adds one value, and a list
channel that only grew (the completed turns) adds only its new items. Rows written by the plain SqliteSaver
(older runs) still read as they are.
"""
from __future__ import annotations

import sqlite3
import threading
import uuid
from pathlib import Path
from typing import Any, Iterator

from langgraph.checkpoint.base import CheckpointTuple
from langgraph.checkpoint.sqlite import SqliteSaver

SCHEMA = """CREATE TABLE IF NOT EXISTS channel_values (
    thread_id TEXT NOT NULL, checkpoint_ns TEXT NOT NULL DEFAULT '', channel TEXT NOT NULL, version TEXT NOT NULL,
    type TEXT, value BLOB, PRIMARY KEY (thread_id, checkpoint_ns, channel, version))"""


# The typed values the loop keeps in its state, allowed by name for LangGraph's msgpack deserializer (which will
# refuse unregistered classes).
STATE_TYPES = [("ptxbench.tools.results", "EvalResult")]
DELTA = "ptxbench-delta"  # the type column of a value stored as a tail on an earlier version


class CompactSqliteSaver(SqliteSaver):
    def __init__(self, conn: sqlite3.Connection, *, serde=None):
        from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

        super().__init__(conn, serde=serde or JsonPlusSerializer(allowed_msgpack_modules=STATE_TYPES))
        self._last: dict[tuple[str, str, str], tuple[str, list]] = {}  # (thread, ns, channel) -> last list stored
        # The parent's setup runs outside its connection lock; the bench's threads all reach it at their first
        # checkpoint read, and concurrent setup statements on one connection fail (SystemError from sqlite3). A lock
        # of its own, since the parent calls setup while holding `self.lock`.
        self._setup_lock = threading.Lock()

    def _dump(self, thread: str, ns: str, ch: str, ver: str, value, stored: dict) -> tuple[str, bytes]:
        """A list channel that only grew since its last stored version (the completed turns) is stored as the new
        items and a reference to that version, so a run's file grows with its turns, not with their square. The list
        goes into `stored`, which put makes the last stored once its rows are written: a failed write (a locked
        database) left later versions stored as tails on a version that was never there, and the thread unreadable."""
        key, last = (thread, ns, ch), self._last.get((thread, ns, ch))
        if isinstance(value, list):
            stored[key] = (ver, list(value))
            if last and last[0] != ver and len(last[1]) <= len(value) and value[:len(last[1])] == last[1]:
                kind, blob = self.serde.dumps_typed(value[len(last[1]):])
                return f"{DELTA}:{last[0]}:{kind}", blob
        return self.serde.dumps_typed(value)

    def _load(self, stored: dict, ch: str, ver: str):
        tails = []
        kind, blob = stored[(ch, ver)]
        while kind.startswith(DELTA + ":"):  # walk back to the full value, then add the tails in order
            _, base, inner = kind.split(":", 2)
            tails.append(self.serde.loads_typed((inner, blob)))
            kind, blob = stored[(ch, base)]
        value = self.serde.loads_typed((kind, blob))
        for tail in reversed(tails):
            value = value + tail
        return value

    def setup(self) -> None:
        if self.is_setup:
            return
        with self._setup_lock:
            if self.is_setup:
                return
            self.conn.execute(SCHEMA)  # before the parent's setup, which sets is_setup
            super().setup()
            self.conn.commit()
            name_after_stored(self.conn)

    def put(self, config, checkpoint, metadata, new_versions):
        self.setup()
        thread, ns = str(config["configurable"]["thread_id"]), config["configurable"].get("checkpoint_ns", "")
        values = checkpoint.get("channel_values") or {}
        versions = checkpoint.get("channel_versions") or {}
        stored: dict[tuple[str, str, str], tuple[str, list]] = {}
        rows = [(thread, ns, ch, str(versions[ch]), *self._dump(thread, ns, ch, str(versions[ch]), v, stored))
                for ch, v in values.items() if ch in versions]
        with self.cursor() as cur:  # an unchanged channel's (channel, version) is stored already: ignored
            cur.executemany("INSERT OR IGNORE INTO channel_values VALUES (?, ?, ?, ?, ?, ?)", rows)
        self._last.update(stored)
        kept = {ch: v for ch, v in values.items() if ch not in versions}  # values without a version stay inline
        return super().put(config, {**checkpoint, "channel_values": kept}, metadata, new_versions)

    def _filled(self, found: CheckpointTuple | None) -> CheckpointTuple | None:
        if found is None:
            return None
        checkpoint, conf = found.checkpoint, found.config["configurable"]
        wanted = {ch: str(v) for ch, v in (checkpoint.get("channel_versions") or {}).items()
                  if ch not in checkpoint.get("channel_values", {})}
        if wanted:
            with self.cursor(transaction=False) as cur:
                cur.execute("SELECT channel, version, type, value FROM channel_values WHERE thread_id = ? AND checkpoint_ns = ?",
                            (str(conf["thread_id"]), conf.get("checkpoint_ns", "")))
                stored = {(ch, ver): (t, v) for ch, ver, t, v in cur.fetchall()}
            values = dict(checkpoint.get("channel_values") or {})
            for ch, ver in wanted.items():
                if (ch, ver) in stored:
                    values[ch] = self._load(stored, ch, ver)
            checkpoint = {**checkpoint, "channel_values": values}
        return found._replace(checkpoint=checkpoint)

    def get_tuple(self, config) -> CheckpointTuple | None:
        self.setup()
        return self._filled(super().get_tuple(config))

    def list(self, config, **kwargs: Any) -> Iterator[CheckpointTuple]:
        self.setup()
        found = list(super().list(config, **kwargs))  # the parent holds the connection's lock while it yields
        for one in found:
            yield self._filled(one)

    def delete_thread(self, thread_id: str) -> None:
        super().delete_thread(thread_id)
        with self.cursor() as cur:
            cur.execute("DELETE FROM channel_values WHERE thread_id = ?", (str(thread_id),))


def name_after_stored(conn: sqlite3.Connection) -> None:
    """Make the checkpoints this process writes sort after every one stored. LangGraph names a checkpoint by a uuid6 of
    the wall clock (increasing within a process) and takes a thread's newest by that name: a run resumed where the clock
    reads earlier (another host, a clock stepped back) wrote names below the killed run's, so the thread's newest read
    back as the killed run's last checkpoint, and a finished trajectory ran again from there."""
    from langgraph.checkpoint.base import id as ids

    row = conn.execute("SELECT MAX(checkpoint_id) FROM checkpoints").fetchone()
    if not row or not row[0]:
        return
    try:
        value = uuid.UUID(row[0]).int
    except (TypeError, ValueError):  # a name of no uuid (not LangGraph's): nothing to keep after
        return
    stored = ((value >> 80) & 0xFFFFFFFFFFFF) << 12 | (value >> 64) & 0x0FFF  # the 100-ns count uuid6 encodes
    if ids._last_v6_timestamp is None or ids._last_v6_timestamp < stored:
        ids._last_v6_timestamp = stored  # the next uuid6 takes this + 1 when the clock reads earlier


def open_checkpointer(path: str | Path) -> CompactSqliteSaver:
    """A SQLite checkpointer (thread id = trajectory id); safe to share between threads."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return CompactSqliteSaver(sqlite3.connect(str(path), check_same_thread=False))

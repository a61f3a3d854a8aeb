"""PostgreSQL's binary COPY format for the Spark COPY writer (:mod:`shardq.spark.writer`): a
chunk's rows assembled with numpy and Arrow, no Python per row."""

from __future__ import annotations

import datetime as dt
import struct
import uuid
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa


#: COPY's binary format: signature, flags, header extension length; and the trailer
COPY_BINARY_HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
COPY_BINARY_TRAILER = struct.pack(">h", -1)
_PG_EPOCH = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)


def plain_rows(table: pa.Table, queue_name: str, opened: dict, workflow_id: uuid.UUID | None = None) -> list[Any]:
    """The chunk's COPY data for spark_chunk_copy_tasks, in COPY's binary format (nothing for the
    server to parse): per row the id, rank and priority (the row's priority, else 0), payload,
    max_attempts (the row's, else the queue's), state 'ready', the queue and the transaction's
    now() as the due time; with ``workflow_id`` (a run with a callback), that id last, for
    spark_chunk_copy_run_tasks. Assembled with numpy and Arrow, no Python per row."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    n = table.num_rows
    head = np.empty((n, 50), np.uint8)  # field count, id, rank, priority, payload length
    head[:, 0:2] = (0, 8 if workflow_id is None else 9)  # field count
    head[:, 2:6] = (0, 0, 0, 16)
    head[:, 6:22] = _fixed_bytes(table.column("id"), 16)
    head[:, 22:26] = head[:, 34:38] = (0, 0, 0, 8)
    if "priority" in table.column_names:
        priority = pc.fill_null(table.column("priority"), 0).to_numpy().astype(">i8")
    else:
        priority = np.zeros(n, ">i8")
    head[:, 26:34] = head[:, 38:46] = priority.view(np.uint8).reshape(n, 8)
    payload = table.column("payload").combine_chunks()
    if pa.types.is_large_binary(payload.type):
        payload = payload.cast(pa.binary())
    head[:, 46:50] = pc.binary_length(payload).to_numpy().astype(">i4").view(np.uint8).reshape(n, 4)

    queue = queue_name.encode("utf-8")
    micros = (opened["now"] - _PG_EPOCH) // dt.timedelta(microseconds=1)
    constant = (
        struct.pack(">ii", 4, int(opened["max_attempts"]))
        + struct.pack(">i", 5)
        + b"ready"
        + struct.pack(">i", len(queue))
        + queue
        + struct.pack(">iq", 8, micros)
    )
    if workflow_id is not None:
        constant += struct.pack(">i", 16) + workflow_id.bytes
    tail = np.frombuffer(constant, np.uint8)[np.newaxis, :].repeat(n, axis=0)
    if "max_attempts" in table.column_names:
        attempts = pc.fill_null(table.column("max_attempts"), int(opened["max_attempts"])).to_numpy()
        tail[:, 4:8] = attempts.astype(">i4").view(np.uint8).reshape(n, 4)
    rows = pc.binary_join_element_wise(_fixed(head), payload, _fixed(tail), pa.scalar(b"", pa.binary()))
    return [COPY_BINARY_HEADER, buffer_of(rows), COPY_BINARY_TRAILER]


def _fixed_bytes(column: Any, width: int) -> Any:
    """A binary column whose values all have ``width`` bytes, as an (n, width) array (no copy)."""
    import numpy as np
    import pyarrow as pa

    array = column.combine_chunks()
    _, offsets, data = array.buffers()
    kind = np.int64 if pa.types.is_large_binary(array.type) else np.int32  # Spark's large var types
    bounds = np.frombuffer(offsets, dtype=kind)[array.offset : array.offset + len(array) + 1]
    if bounds[-1] - bounds[0] != width * len(array):
        raise ValueError(f"expected {width}-byte values")
    return np.frombuffer(data, np.uint8)[int(bounds[0]) : int(bounds[-1])].reshape(len(array), width)


def _fixed(rows: Any) -> Any:
    """An (n, w) byte array as an Arrow binary array of n values of w bytes (no copy of the bytes)."""
    import numpy as np
    import pyarrow as pa

    n, width = rows.shape
    offsets = (np.arange(n + 1, dtype=np.int32) * width).tobytes()
    return pa.Array.from_buffers(
        pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(rows))]
    )


def buffer_of(column: Any) -> memoryview:
    """The bytes of a string column's values, end to end (each value ends in a newline)."""
    import numpy as np
    import pyarrow as pa

    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if len(array) == 0:
        return memoryview(b"")
    _, offsets, data = array.buffers()
    width = np.int64 if pa.types.is_large_string(array.type) or pa.types.is_large_binary(array.type) else np.int32
    bounds = np.frombuffer(offsets, dtype=width)[array.offset : array.offset + len(array) + 1]
    return memoryview(data)[int(bounds[0]) : int(bounds[-1])]

"""Serve a model to capflow over its Arrow IPC stream protocol (see docs/adapters.md).

An adapter reads one Arrow IPC stream on stdin and writes one on stdout:

* request stream: schema ``request_id: int64`` plus the kind's input columns (``text``,
  ``penman``, or ``image`` and ``text``, all utf8), with schema metadata ``capflow.protocol``,
  ``capflow.kind`` and ``capflow.adapter``; then one record batch per request batch;
* reply stream: schema ``request_id: int64`` plus the kind's output column; then exactly one
  record batch per request batch, in order, echoing ``request_id``.

Usage::

    from capflow_adapter import serve

    def score(batch):                       # a pyarrow.RecordBatch
        return [min(1.0, len(t) / 100) for t in batch.column("text").to_pylist()]

    serve("quality_scorer", score)

Anything the model prints goes to stderr: ``serve`` moves the reply stream to a private file
descriptor and points file descriptor 1 (and ``sys.stdout``) at stderr before it calls the
handler, because a stray ``print`` on stdout would corrupt the reply stream.
"""

import os
import sys

import pyarrow as pa

PROTOCOL_VERSION = "1"

#: The reply column for each model kind.
REPLY_FIELDS = {
    "text_to_amr": pa.field("penman", pa.string(), nullable=False),
    "amr_to_text": pa.field("text", pa.string(), nullable=False),
    "quality_scorer": pa.field("score", pa.float64(), nullable=False),
    "embedder": pa.field("vector", pa.list_(pa.float32()), nullable=False),
    "image_text_scorer": pa.field("score", pa.float64(), nullable=False),
}


def serve(kind, handle):
    """Answer request batches with ``handle(batch)`` until capflow closes the request stream.

    ``handle`` receives a ``pyarrow.RecordBatch`` with the request columns and returns a
    sequence (or pyarrow array) of ``batch.num_rows`` outputs: strings, floats in [0, 1], or
    float vectors of one dimension. An exception ends the process with a non-zero status and
    its traceback on stderr; capflow restarts the adapter and retries the batch once.
    """
    if kind not in REPLY_FIELDS:
        raise ValueError(f"unknown model kind {kind!r}; expected one of {sorted(REPLY_FIELDS)}")
    requests_in = sys.stdin.buffer
    # Keep the real stdout for replies and point file descriptor 1 at stderr, so that neither
    # Python prints nor native libraries writing to fd 1 can corrupt the reply stream.
    sys.stdout.flush()
    replies_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    reader = pa.ipc.open_stream(requests_in)
    metadata = reader.schema.metadata or {}
    version = metadata.get(b"capflow.protocol", b"").decode()
    requested = metadata.get(b"capflow.kind", b"").decode()
    if version != PROTOCOL_VERSION:
        sys.exit(f"capflow protocol {version!r} is not supported (this adapter speaks {PROTOCOL_VERSION})")
    if requested != kind:
        sys.exit(f"this adapter serves {kind!r} but capflow configured it as {requested!r}")

    field = REPLY_FIELDS[kind]
    reply_schema = pa.schema([pa.field("request_id", pa.int64(), nullable=False), field])
    writer = pa.ipc.new_stream(replies_out, reply_schema)
    for batch in reader:
        values = handle(batch)
        if not isinstance(values, pa.Array):
            values = pa.array(values, type=field.type)
        reply = pa.record_batch([batch.column("request_id"), values], schema=reply_schema)
        writer.write_batch(reply)
        replies_out.flush()
    writer.close()
    replies_out.flush()

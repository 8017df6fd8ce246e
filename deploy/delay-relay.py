#!/usr/bin/env python3
"""Delaying TCP relay for skein-local: adds latency between the gateway and a storage server.

Usage: delay-relay.py LISTEN_PORT TARGET_PORT DELAY_MS [--tag TEXT]

Listens on 127.0.0.1:LISTEN_PORT and forwards every connection to
127.0.0.1:TARGET_PORT. Each chunk of data is held back DELAY_MS/2 milliseconds
in each direction, so a request/response round trip takes about DELAY_MS
longer. Chunks are queued, not serialised behind one another, so the delay
adds latency without capping throughput. A close or reset on one side is passed
on to the other side (after the data already queued has been delivered, for a
clean close), so a storage server that dies still drops its clients' connections.

--tag TEXT is not used by the relay: it only appears on the command line so
that tooling can find the relay's process (skein-local passes the server's
state directory).

Standard library only.
"""

import argparse
import asyncio
import signal
import sys
import time

CHUNK = 64 * 1024          # bytes read at once
QUEUE_CHUNKS = 256         # at most this many chunks in flight per direction (16 MiB)
RESET = object()           # queue marker: the reading side failed


async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay_s: float) -> None:
    """Copy reader -> writer, delivering each chunk delay_s after it was read."""
    queue: asyncio.Queue = asyncio.Queue(maxsize=QUEUE_CHUNKS)

    async def read_side() -> None:
        end = None  # clean end of stream
        try:
            while True:
                data = await reader.read(CHUNK)
                if not data:
                    break
                await queue.put((time.monotonic() + delay_s, data))
        except (ConnectionError, OSError):
            end = RESET
        await queue.put((time.monotonic() + delay_s, end))

    async def write_side() -> None:
        while True:
            due, data = await queue.get()
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if data is RESET:
                raise ConnectionResetError("peer reset the connection")
            if data is None:
                # Clean end of stream: half-close so the peer sees EOF.
                if writer.can_write_eof():
                    writer.write_eof()
                await writer.drain()
                return
            writer.write(data)
            await writer.drain()

    reader_task = asyncio.ensure_future(read_side())
    try:
        await write_side()
    finally:
        reader_task.cancel()


async def handle(client_reader, client_writer, target_port: int, delay_s: float) -> None:
    try:
        server_reader, server_writer = await asyncio.open_connection("127.0.0.1", target_port)
    except OSError:
        # Target down (e.g. the storage server was stopped): refuse by closing.
        client_writer.transport.abort()
        return
    up = asyncio.ensure_future(pump(client_reader, server_writer, delay_s))
    down = asyncio.ensure_future(pump(server_reader, client_writer, delay_s))
    try:
        done, _ = await asyncio.wait({up, down}, return_when=asyncio.FIRST_EXCEPTION)
        if any(t.exception() is not None for t in done if not t.cancelled()):
            raise ConnectionError("relay direction failed")
        # Both directions finished cleanly (both halves closed).
        await asyncio.wait({up, down})
        client_writer.close()
        server_writer.close()
    except (ConnectionError, OSError, asyncio.CancelledError):
        # One side was reset or failed, or the relay is shutting down: drop
        # both sides at once. (This is the connection's top-level task, so
        # ending quietly on cancellation is fine.)
        client_writer.transport.abort()
        server_writer.transport.abort()
    finally:
        for t in (up, down):
            t.cancel()


async def main() -> int:
    parser = argparse.ArgumentParser(description="Delaying TCP relay on 127.0.0.1.")
    parser.add_argument("listen_port", type=int)
    parser.add_argument("target_port", type=int)
    parser.add_argument("delay_ms", type=float, help="added round-trip time in milliseconds")
    parser.add_argument("--tag", default="", help="ignored; lets tooling find this process")
    args = parser.parse_args()
    delay_s = max(args.delay_ms, 0.0) / 2000.0  # half of the round trip each way

    server = await asyncio.start_server(
        lambda r, w: handle(r, w, args.target_port, delay_s),
        host="127.0.0.1", port=args.listen_port, reuse_address=True)
    print(f"delay-relay: 127.0.0.1:{args.listen_port} -> 127.0.0.1:{args.target_port}, "
          f"+{args.delay_ms:g} ms round trip", flush=True)

    stop = asyncio.get_running_loop().create_future()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, lambda: stop.done() or stop.set_result(None))
    async with server:
        await stop
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

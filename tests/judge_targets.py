"""Stand-ins for the candidate's process, for the judge-protocol tests (spawned, so they live in an importable module)."""

import os
import struct


def answers_garbage(conn, *_):
    os.setpgid(0, 0)
    conn.recv()
    conn.send_bytes(b"this is not json")
    conn.recv()


def writes_raw_bytes(conn, *_):
    os.setpgid(0, 0)
    conn.recv()
    os.write(conn.fileno(), b'{"token": "guess", "result": {"status": "correct"}}\n')
    conn.recv()


def dies_mid_reply(conn, *_):
    os.setpgid(0, 0)
    conn.recv()
    os.write(conn.fileno(), struct.pack("!i", 1000) + b'{"status": "o')  # a header promising 1000 bytes, then death
    os._exit(7)


def answers_too_much(conn, *_):
    os.setpgid(0, 0)
    conn.recv()
    conn.send_bytes(b'{"status": "ok", "message": "' + b"x" * (2 << 20) + b'"}')
    conn.recv()


def answers_negative_time(conn, *_):
    os.setpgid(0, 0)
    conn.recv()
    conn.send_bytes(b'{"status": "ok", "timed_s": -1.0}')
    conn.recv()

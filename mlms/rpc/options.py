"""Message limits and keepalive settings, chosen once for every channel and server."""

from __future__ import annotations

#: A 64-sample batch of 3x299x299 float32 images is 69 MB; 64 MiB holds a 1x3x224x224 tensor
#: 100 times over and keeps one bad request from taking a gigabyte of the agent's memory.
#: Past it gRPC answers RESOURCE_EXHAUSTED.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024

#: Span archives and similar bulk replies are streamed in chunks of this size.
CHUNK_BYTES = 1024 * 1024

_LIMITS = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
]

SERVER_OPTIONS = [
    *_LIMITS,
    # Clients ping every 10 s to find a dead peer mid-evaluation; allow it without data.
    ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
]

CHANNEL_OPTIONS = [
    *_LIMITS,
    # A peer that vanishes without a TCP reset (power loss, partition) is noticed within
    # keepalive_time + keepalive_timeout instead of hanging a streaming evaluation forever.
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.enable_retries", 0),
]

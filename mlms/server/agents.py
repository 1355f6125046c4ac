"""Channels and stubs to agents, one channel per address, reused across calls."""

from __future__ import annotations

import threading

import grpc

from mlms.protos.mlms.v2 import predictor_pb2_grpc
from mlms.rpc.options import CHANNEL_OPTIONS
from mlms.security.tls import TlsFiles, open_channel


class AgentChannels:
    def __init__(
        self, tls: TlsFiles | None = None, *, insecure: bool = False, agent_name: str | None = None
    ) -> None:
        """Under TLS every channel verifies the agent's certificate (for its address, or for
        ``agent_name``) and shows the server's."""
        self.tls = tls or TlsFiles()
        self.insecure = insecure
        self.agent_name = agent_name
        self._channels: dict[str, grpc.Channel] = {}
        self._lock = threading.Lock()

    def stub(self, address: str) -> predictor_pb2_grpc.PredictorStub:
        with self._lock:
            channel = self._channels.get(address)
            if channel is None:
                channel = open_channel(
                    address,
                    self.tls,
                    insecure=self.insecure,
                    options=CHANNEL_OPTIONS,
                    server_name=self.agent_name,
                )
                self._channels[address] = channel
        return predictor_pb2_grpc.PredictorStub(channel)

    def close(self) -> None:
        with self._lock:
            channels, self._channels = list(self._channels.values()), {}
        for channel in channels:
            channel.close()

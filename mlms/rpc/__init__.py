"""gRPC plumbing shared by the agent, the server and the remote client.

``options`` (message limits, keepalive), ``status`` (mlms errors <-> status codes),
``serving`` (a server with health, reflection and the error interceptor), ``tensors``
(numpy <-> ``mlms.v2.Tensor``), ``propagation`` (W3C trace context in metadata) and ``otlp``
(span export). Generated code lives in ``mlms.protos``; only these modules and the servicers
touch it.
"""

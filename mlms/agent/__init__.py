"""The agent process: its gRPC services, its registration, and child agents per virtualenv."""

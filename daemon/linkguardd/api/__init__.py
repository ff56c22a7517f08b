"""The operator API: linkguard.v1 over gRPC on a unix socket (server.py), with drain/undrain
authorised from the caller's kernel credentials (peercred.py)."""
from linkguardd.api.server import ApiError, ApiServer, DaemonIdentity

__all__ = ["ApiError", "ApiServer", "DaemonIdentity"]

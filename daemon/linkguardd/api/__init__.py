"""The operator API: linkguard.v1 over gRPC on an admin and a read-only unix socket, each
checked by the kernel at connect() (server.py); callers.py names a caller for the audit log."""
from linkguardd.api.server import ApiError, ApiServer, DaemonIdentity

__all__ = ["ApiError", "ApiServer", "DaemonIdentity"]

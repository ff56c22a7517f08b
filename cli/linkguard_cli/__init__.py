"""linkguard-cli: the operator's command line for linkguardd (main.py), over its gRPC API."""

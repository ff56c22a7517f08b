"""Jobs' verdicts on NICs: the datagram the NCCL plugin sends (wire.py) and what the daemon keeps
of them (store.py). The socket itself is a monitor: monitors/plugin_verdicts.py."""

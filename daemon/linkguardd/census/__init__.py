"""Jobs' connection census: the datagram each NCCL plugin process sends (wire.py), what the
daemon keeps of it (store.py) and what operators see of it (view.py). It arrives on the verdict
socket: monitors/plugin_verdicts.py tells the two kinds apart by magic."""

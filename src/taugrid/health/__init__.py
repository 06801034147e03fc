"""GPU health on the node: the fault sources (``taugrid.ports.health.FaultSource``) and the
watchdog every call runs under. The classifier that judges what they see is pure
(``taugrid.domain.health``); what is done about it is the server's (``server.health``).
``pynvml`` is imported only inside the NVML sources."""

"""linkguard-lab: a small multi-rail cluster built from network namespaces, with real link faults.

    from linkguard_lab import Lab
    with Lab("lgx", hosts=2, rails=2).up() as lab:
        t = lab.cut("a", 0)          # CLOCK_MONOTONIC ns just before the kernel event
        assert not lab.carrier("a", 0) and lab.carrier("b", 0)
"""

from linkguard_lab.errors import LabError
from linkguard_lab.lab import Lab
from linkguard_lab.topology import Topology

__all__ = ["Lab", "LabError", "Topology"]

"""Lab tier: tests that build network namespaces (root only; CI runs as root)."""

from daemon_fixture import daemons  # noqa: F401
from slurm_fixture import slurm_cluster  # noqa: F401

from linkguard_lab.pytest_fixture import lab, lab_factory  # noqa: F401

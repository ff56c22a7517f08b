"""linkguard on Slurm: a health check that drains nodes whose NIC pairs have no healthy member
(healthcheck.py) and a task prolog that gives jobs the NCCL plugin (taskprolog.py)."""

"""`python -m linkguard_lab` is the same as the `linkguard-lab` console script."""

from linkguard_lab.cli import main

main()

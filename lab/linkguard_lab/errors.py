"""The one error type of the lab: its message is a single line meant for the user."""


class LabError(Exception):
    """Bad input, a missing or duplicate lab, or a failed kernel call. The CLI exits 2 on it."""

"""The one error type of the results library."""


class ResultsError(Exception):
    """Bad input for the results tools (missing folder, nothing parsable, unknown method); printed as one line."""

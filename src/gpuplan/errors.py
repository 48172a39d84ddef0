"""The one exception type users see: a message that names the problem and the fix."""


class GpuplanError(ValueError):
    """Bad input. The CLI prints ``str(err)`` on one line and exits with status 2."""

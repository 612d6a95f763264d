"""SimError: what the CPU simulator reports when a kernel does not compile or does not run."""

from __future__ import annotations


class SimError(Exception):
    """A compile error, runtime fault, deadlock or timeout of a simulated kernel.

    ``line`` is a line number in the kernel's *own* source (the body given to ``metal_kernel`` /
    ``cuda_kernel``, or the ``.cu`` file), or ``None`` when the problem has no line. ``file`` names
    which text the line belongs to (``"source"``, ``"header"`` or the ``.cu`` file name). ``kind`` is
    one of ``compile``, ``fault``, ``deadlock``, ``timeout``, ``race``, ``assert`` (a failed assert() in the
    kernel), ``resource_limit``, ``crash``, ``usage``.
    """

    def __init__(self, message: str, line: int | None = None, *, file: str | None = None,
                 kind: str = "compile", details: str = ""):
        super().__init__(message)
        self.message = message
        self.line = line
        self.file = file
        self.kind = kind
        self.details = details

    def __reduce__(self):  # keep line/file/kind across pickling (errors cross process boundaries)
        return (_rebuild, (self.message, self.line, self.file, self.kind, self.details))

    def __str__(self) -> str:
        where = ""
        if self.line is not None:
            where = f" ({self.file or 'source'} line {self.line})"
        return f"{self.message}{where}"


def _rebuild(message, line, file, kind, details) -> SimError:
    return SimError(message, line, file=file, kind=kind, details=details)

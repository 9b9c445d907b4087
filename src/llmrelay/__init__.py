"""llmrelay: an LLM API gateway. Subpackages each own one job; see docs/architecture.md."""

import sys

from llmrelay import _compiled

__version__ = "0.1.0"

_compiled.choose()  # before any compiled module is imported


def _structlog_without_rich() -> None:
    """Import structlog with `rich` hidden. structlog's console renderer imports rich (and
    pygments) when it is installed, as typer installs it, for colourful tracebacks; llmrelay
    logs JSON lines with plain tracebacks (observability/logging.py), and rich with pygments
    is 3.4 MiB of every serving process's resident memory. Later imports of rich (typer's
    help) work as before: the stand-in is removed."""
    if "structlog" in sys.modules or "rich" in sys.modules:
        return
    sys.modules["rich"] = None  # type: ignore[assignment]  # `import rich` raises ImportError
    try:
        import structlog  # noqa: F401
    finally:
        if sys.modules.get("rich", False) is None:
            del sys.modules["rich"]


_structlog_without_rich()

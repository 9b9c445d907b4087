"""llmrelay: an LLM API gateway. Subpackages each own one job; see docs/architecture.md."""

from llmrelay import _compiled

__version__ = "0.1.0"

_compiled.choose()  # before any compiled module is imported

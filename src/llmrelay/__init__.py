"""llmrelay: an LLM API gateway. Subpackages each own one job; see docs/architecture.md."""

__version__ = "0.1.0"

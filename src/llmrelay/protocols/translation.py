"""What every translator between two wire protocols shares.

The gateway's internal form is the OpenAI Chat Completions shape (request body, completion,
chunk): each other protocol has one translator to it and one from it, never one per pair. A
Messages client reaching a Gemini provider goes Messages -> Chat -> Gemini and back.
"""

from __future__ import annotations

from llmrelay.protocols.errors import TranslationError

__all__ = ["TranslationError"]  # its home is protocols/errors.py; imported from here as well

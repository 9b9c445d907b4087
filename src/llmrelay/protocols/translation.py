"""What every translator between two wire protocols shares.

The gateway's internal form is the OpenAI Chat Completions shape (request body, completion,
chunk): each other protocol has one translator to it and one from it, never one per pair. A
Messages client reaching a Gemini provider goes Messages -> Chat -> Gemini and back.
"""

from __future__ import annotations


class TranslationError(ValueError):
    """The request uses something the target protocol cannot express. The client gets a 400
    naming `param` (a field of the client's request), never a silent drop."""

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param

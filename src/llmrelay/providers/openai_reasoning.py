"""Which of OpenAI's own models take `reasoning_effort`.

OpenAI's API answers 400 `Unsupported parameter: 'reasoning_effort' is not supported with this
model` for its models that do not reason (gpt-4o, gpt-4.1, gpt-5-chat, o1-mini...): a request
translated from a client that always asks for an effort (Claude Code's `output_config.effort`)
would fail on every such route. The reasoning families are told by name: o1, o3, o4 and gpt-5
and later (bar the chat snapshots), and codex models. For `azure_openai` the name is the
deployment's, which usually names its model; an unknown name is taken to reason (the
provider's own answer then says otherwise). OpenAI-compatible servers are not judged here:
they take the field or ignore it.
"""

from __future__ import annotations

import re
from typing import Final

_REASONS: Final = re.compile(r"(o[1-9]|gpt-[5-9]|gpt-\d\d|codex)", re.IGNORECASE)
_DOES_NOT: Final = re.compile(
    r"(gpt-[1-4](?![0-9])|gpt-3\.5|chatgpt|gpt-[5-9](\.\d+)?-chat|o1-mini|o1-preview)",
    re.IGNORECASE,
)


def takes_reasoning_effort(upstream_model: str) -> bool:
    """Whether an OpenAI (or Azure OpenAI) model takes `reasoning_effort`."""
    name = upstream_model.rsplit("/", 1)[-1]
    if _DOES_NOT.match(name):
        return False
    return _REASONS.match(name) is not None or not name.startswith(("gpt-", "chatgpt"))

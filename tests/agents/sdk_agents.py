"""The Python agent frameworks as the agent tests run them: one small agent with a shell tool,
run once on a prompt, streamed, printing its final answer.

    python tests/agents/sdk_agents.py FLAVOUR PROMPT HISTORY [--continue]

FLAVOUR: `agents-responses` (OpenAI Agents SDK, OpenAIResponsesModel), `agents-chat` (OpenAI
Agents SDK, OpenAIChatCompletionsModel), `pydantic-ai` (pydantic-ai's OpenAIChatModel).
OPENAI_BASE_URL, OPENAI_API_KEY and AGENT_MODEL say where to; tracing is off (the Agents SDK
would otherwise export traces to OpenAI). The conversation is written to the file HISTORY after
the run (the SDK's own serialisation); with `--continue` the run starts from it, as a second turn
of the same conversation. It runs as its own process, through
tests.support.agent_clients, so that it gets the same clean environment and timeout as the
node clients, and imports nothing from the repository (the harness forks it from a process
that imported the SDKs once, in a clean environment: tests/support/zygote.py, `agents`).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

INSTRUCTIONS = "You are a helpful assistant. Use the shell tool to run commands when asked."


def run_shell(command: str) -> str:
    """Run a shell command and return what it printed."""
    done = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=30)
    return done.stdout + done.stderr


async def agents_sdk(prompt: str, responses: bool, history: Path, continued: bool) -> str:
    from agents import (
        Agent,
        OpenAIChatCompletionsModel,
        OpenAIResponsesModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )
    from openai import AsyncOpenAI

    set_tracing_disabled(True)

    @function_tool
    def shell(command: str) -> str:
        """Run a shell command and return what it printed.

        Args:
            command: the command line, run by /bin/sh.
        """
        return run_shell(command)

    client = AsyncOpenAI(max_retries=0)
    name = os.environ["AGENT_MODEL"]
    model = (
        OpenAIResponsesModel(model=name, openai_client=client)
        if responses
        else OpenAIChatCompletionsModel(model=name, openai_client=client)
    )
    agent = Agent(name="shell-agent", instructions=INSTRUCTIONS, tools=[shell], model=model)
    given: str | list[object] = prompt
    if continued:
        earlier = json.loads(await asyncio.to_thread(history.read_text))
        given = [*earlier, {"role": "user", "content": prompt}]
    result = Runner.run_streamed(agent, given)  # type: ignore[arg-type]
    async for _ in result.stream_events():
        pass
    await client.close()
    await asyncio.to_thread(history.write_text, json.dumps(result.to_input_list()))
    return str(result.final_output)


async def pydantic_ai(prompt: str, history: Path, continued: bool) -> str:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessagesTypeAdapter
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    provider = OpenAIProvider(
        base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"]
    )
    model = OpenAIChatModel(os.environ["AGENT_MODEL"], provider=provider)
    agent = Agent(model, instructions=INSTRUCTIONS)

    @agent.tool_plain
    def shell(command: str) -> str:
        """Run a shell command and return what it printed.

        Args:
            command: the command line, run by /bin/sh.
        """
        return run_shell(command)

    earlier = None
    if continued:
        earlier = ModelMessagesTypeAdapter.validate_json(
            await asyncio.to_thread(history.read_bytes)
        )
    async with agent.run_stream(prompt, message_history=earlier) as result:
        output = await result.get_output()
    await asyncio.to_thread(history.write_bytes, result.all_messages_json())
    return str(output)


def main() -> None:
    flavour, prompt, history = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    continued = "--continue" in sys.argv[4:]
    if flavour == "agents-responses":
        answer = asyncio.run(agents_sdk(prompt, True, history, continued))
    elif flavour == "agents-chat":
        answer = asyncio.run(agents_sdk(prompt, False, history, continued))
    elif flavour == "pydantic-ai":
        answer = asyncio.run(pydantic_ai(prompt, history, continued))
    else:
        raise SystemExit(f"unknown flavour {flavour!r}")
    print(answer)


if __name__ == "__main__":
    main()

"""The Python agent frameworks as the agent tests run them: one small agent with a shell tool,
run once on a prompt, streamed, printing its final answer.

    python tests/agents/sdk_agents.py FLAVOUR PROMPT

FLAVOUR: `agents-responses` (OpenAI Agents SDK, OpenAIResponsesModel), `agents-chat` (OpenAI
Agents SDK, OpenAIChatCompletionsModel), `pydantic-ai` (pydantic-ai's OpenAIChatModel).
OPENAI_BASE_URL, OPENAI_API_KEY and AGENT_MODEL say where to; tracing is off (the Agents SDK
would otherwise export traces to OpenAI). It runs as its own process, through
tests.support.agent_clients, so that it gets the same clean environment and timeout as the
node clients, and imports nothing from the repository.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

INSTRUCTIONS = "You are a helpful assistant. Use the shell tool to run commands when asked."


def run_shell(command: str) -> str:
    """Run a shell command and return what it printed."""
    done = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=30)
    return done.stdout + done.stderr


async def agents_sdk(prompt: str, responses: bool) -> str:
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
    result = Runner.run_streamed(agent, prompt)
    async for _ in result.stream_events():
        pass
    await client.close()
    return str(result.final_output)


async def pydantic_ai(prompt: str) -> str:
    from pydantic_ai import Agent
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

    async with agent.run_stream(prompt) as result:
        output = await result.get_output()
    return str(output)


def main() -> None:
    flavour, prompt = sys.argv[1], sys.argv[2]
    if flavour == "agents-responses":
        answer = asyncio.run(agents_sdk(prompt, responses=True))
    elif flavour == "agents-chat":
        answer = asyncio.run(agents_sdk(prompt, responses=False))
    elif flavour == "pydantic-ai":
        answer = asyncio.run(pydantic_ai(prompt))
    else:
        raise SystemExit(f"unknown flavour {flavour!r}")
    print(answer)


if __name__ == "__main__":
    main()

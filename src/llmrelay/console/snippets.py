"""Quickstart snippets (curl, Python with the openai SDK, Node with the openai package) for
this gateway's real base URL and a real model name. The key is read from the environment
(LLMRELAY_API_KEY): a snippet copied into a shell history or a chat holds no secret."""

from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Snippet:
    language: str  # curl | python | node
    title: str
    code: str


def _messages(text: str) -> str:
    return json.dumps([{"role": "user", "content": text}])


def first_request(base_url: str, model: str) -> list[Snippet]:
    api = f"{base_url}/v1"
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "Hello!"}]})
    return [
        Snippet(
            "curl",
            "curl",
            f"""curl {api}/chat/completions \\
  -H "Authorization: Bearer $LLMRELAY_API_KEY" \\
  -H "Content-Type: application/json" \\
  -d '{body}'""",
        ),
        Snippet(
            "python",
            "Python (openai)",
            f"""import os
from openai import OpenAI

client = OpenAI(base_url="{api}", api_key=os.environ["LLMRELAY_API_KEY"])
reply = client.chat.completions.create(
    model={json.dumps(model)}, messages={_messages("Hello!")}
)
print(reply.choices[0].message.content)""",
        ),
        Snippet(
            "node",
            "Node (openai)",
            f"""import OpenAI from "openai";

const client = new OpenAI({{ baseURL: "{api}", apiKey: process.env.LLMRELAY_API_KEY }});
const reply = await client.chat.completions.create({{
  model: {json.dumps(model)},
  messages: {_messages("Hello!")},
}});
console.log(reply.choices[0].message.content);""",
        ),
    ]


def streaming(base_url: str, model: str) -> list[Snippet]:
    api = f"{base_url}/v1"
    body = json.dumps(
        {
            "model": model,
            "stream": True,
            "messages": [{"role": "user", "content": "Tell me a story"}],
        }
    )
    return [
        Snippet(
            "curl",
            "curl",
            f"""curl -N {api}/chat/completions \\
  -H "Authorization: Bearer $LLMRELAY_API_KEY" \\
  -H "Content-Type: application/json" \\
  -d '{body}'""",
        ),
        Snippet(
            "python",
            "Python (openai)",
            f"""import os
from openai import OpenAI

client = OpenAI(base_url="{api}", api_key=os.environ["LLMRELAY_API_KEY"])
stream = client.chat.completions.create(
    model={json.dumps(model)}, messages={_messages("Tell me a story")}, stream=True
)
for chunk in stream:
    if chunk.choices:
        print(chunk.choices[0].delta.content or "", end="", flush=True)""",
        ),
        Snippet(
            "node",
            "Node (openai)",
            f"""import OpenAI from "openai";

const client = new OpenAI({{ baseURL: "{api}", apiKey: process.env.LLMRELAY_API_KEY }});
const stream = await client.chat.completions.create({{
  model: {json.dumps(model)},
  messages: {_messages("Tell me a story")},
  stream: true,
}});
for await (const chunk of stream) {{
  process.stdout.write(chunk.choices[0]?.delta?.content ?? "");
}}""",
        ),
    ]

"""Drives a running kestrel server with the official `openai` Python client.

Usage: python openai_client.py BASE_URL API_KEY MODEL
Exits non-zero (an assertion with a message) on the first thing that does not work.
"""
import base64
import json
import struct
import sys

import openai
from openai import OpenAI

base_url, api_key, model = sys.argv[1], sys.argv[2], sys.argv[3]
client = OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=300)
checks = []


def check(name):
    def wrap(f):
        checks.append((name, f))
        return f
    return wrap


@check("models")
def _():
    ids = [m.id for m in client.models.list().data]
    assert ids == [model], ids
    assert client.models.retrieve(model).id == model


@check("chat")
def _():
    r = client.chat.completions.create(
        model=model,
        messages=[{"role": "system", "content": "You are helpful."},
                  {"role": "user", "content": "What is the capital of France?"}],
        max_tokens=24, temperature=0)
    c = r.choices[0]
    assert r.object == "chat.completion"
    assert c.message.role == "assistant" and isinstance(c.message.content, str) and c.message.content
    assert c.finish_reason in ("stop", "length"), c.finish_reason
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens > 0


@check("chat streaming with usage")
def _():
    kw = dict(model=model, messages=[{"role": "user", "content": "Name three colours."}],
              max_tokens=20, temperature=0)
    whole = client.chat.completions.create(**kw).choices[0].message.content
    text, usage, finish = "", None, None
    for chunk in client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw):
        if chunk.usage is not None:
            usage = chunk.usage
        for ch in chunk.choices:
            text += ch.delta.content or ""
            finish = ch.finish_reason or finish
    assert text == whole, (text, whole)
    assert usage is not None and usage.completion_tokens > 0, usage
    assert finish in ("stop", "length")


@check("completions")
def _():
    r = client.completions.create(model=model, prompt=["Once upon a time", "The sky is"], max_tokens=8,
                                  temperature=0.8, seed=4, n=2)
    assert [c.index for c in r.choices] == [0, 1, 2, 3], r.choices
    assert all(isinstance(c.text, str) for c in r.choices)
    s = "".join(c.choices[0].text for c in client.completions.create(
        model=model, prompt="Once upon a time", max_tokens=8, temperature=0, stream=True))
    assert s == client.completions.create(model=model, prompt="Once upon a time", max_tokens=8,
                                          temperature=0).choices[0].text


@check("embeddings")
def _():
    r = client.embeddings.create(model=model, input=["a cat sat on the mat", "a cat sat on the mat"])
    a, b = r.data[0].embedding, r.data[1].embedding
    assert len(a) == len(b) > 0
    assert abs(sum(x * y for x, y in zip(a, b)) - 1.0) < 1e-4
    f = client.embeddings.create(model=model, input="hello", encoding_format="float").data[0].embedding
    raw = client.with_raw_response.embeddings.create(model=model, input="hello", encoding_format="base64")
    b64 = json.loads(raw.text)["data"][0]["embedding"]
    decoded = struct.unpack(f"<{len(f)}f", base64.b64decode(b64))
    assert max(abs(x - y) for x, y in zip(f, decoded)) < 1e-6


@check("json_schema response_format")
def _():
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 16},
              "age": {"type": "integer", "minimum": 0, "maximum": 120}},
              "required": ["name", "age"], "additionalProperties": False}
    r = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Invent a person."}], max_tokens=80, seed=2,
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": schema, "strict": True}})
    v = json.loads(r.choices[0].message.content)
    assert set(v) == {"name", "age"} and isinstance(v["age"], int), v


@check("tool call round trip")
def _():
    tools = [{"type": "function", "function": {
        "name": "get_weather", "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24}},
                       "required": ["city"]}}}]
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    r = client.chat.completions.create(model=model, messages=msgs, tools=tools, tool_choice="required",
                                       max_tokens=48, temperature=0)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls", c
    call = c.message.tool_calls[0]
    assert call.function.name == "get_weather"
    args = json.loads(call.function.arguments)
    assert isinstance(args["city"], str)
    msgs.append(c.message.model_dump(exclude_none=True))
    msgs.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temp_c": 18, "sky": "sunny"})})
    r = client.chat.completions.create(model=model, messages=msgs, tools=tools, max_tokens=24, temperature=0)
    m = r.choices[0].message
    assert m.content is not None or m.tool_calls, m


@check("errors")
def _():
    try:
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": "x"}], max_tokens=-1)
        raise AssertionError("negative max_tokens accepted")
    except openai.BadRequestError as e:
        assert e.status_code == 400 and e.body["param"] == "max_tokens", e.body
    try:
        client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "x"}])
        raise AssertionError("unknown model accepted")
    except openai.NotFoundError as e:
        assert e.status_code == 404
    try:
        OpenAI(base_url=base_url, api_key="wrong", max_retries=0).models.list()
        raise AssertionError("wrong key accepted")
    except openai.AuthenticationError as e:
        assert e.status_code == 401


failed = 0
for name, f in checks:
    try:
        f()
        print(f"ok   {name}")
    except Exception as e:  # report every check, then fail
        failed += 1
        print(f"FAIL {name}: {type(e).__name__}: {e}")
print(f"openai {openai.__version__}: {len(checks) - failed}/{len(checks)} checks passed")
sys.exit(1 if failed else 0)

"""kestrel: run GGUF language models from Python.

>>> import kestrel
>>> model = kestrel.Model.load("SmolLM2-135M-Instruct.Q4_1.gguf", threads=2)
>>> print(model.chat([{"role": "user", "content": "Hi!"}], max_tokens=32))
>>> for piece in model.stream("The sky is", max_tokens=16):
...     print(piece, end="", flush=True)

`Model` runs the model (every call releases the GIL); `create_chat_completion` answers in
OpenAI's shape for code written against llama-cpp-python.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Dict, Iterator, List, Optional, Union

from ._kestrel import (  # noqa: F401  (re-exported)
    InvalidArgumentError,
    KestrelError,
    Model as _Model,
    ModelNotFoundError,
    TokenStream,
    __version__,
)

__all__ = [
    "Model",
    "TokenStream",
    "KestrelError",
    "ModelNotFoundError",
    "InvalidArgumentError",
    "create_chat_completion",
    "__version__",
]

Model = _Model


def _schema(response_format: Optional[Dict[str, Any]]) -> Optional[Any]:
    """The JSON Schema an OpenAI `response_format` asks for (None: free text)."""
    if response_format is None:
        return None
    if not isinstance(response_format, dict):
        raise InvalidArgumentError("response_format must be a dict such as {'type': 'json_object'}")
    kind = response_format.get("type")
    if kind in (None, "text"):
        return None
    if kind == "json_object":
        return response_format.get("schema") or {"type": "object"}
    if kind == "json_schema":
        spec = response_format.get("json_schema") or {}
        if "schema" not in spec:
            raise InvalidArgumentError("response_format json_schema needs json_schema.schema")
        return spec["schema"]
    raise InvalidArgumentError(f"unknown response_format type {kind!r}")


def create_chat_completion(
    model: Model,
    messages: List[Dict[str, Any]],
    *,
    max_tokens: Optional[int] = None,
    temperature: Optional[float] = None,
    top_p: Optional[float] = None,
    top_k: Optional[int] = None,
    min_p: Optional[float] = None,
    repeat_penalty: Optional[float] = None,
    seed: Optional[int] = None,
    stop: Optional[Union[str, List[str]]] = None,
    response_format: Optional[Dict[str, Any]] = None,
    stream: bool = False,
    model_name: str = "kestrel",
) -> Union[Dict[str, Any], Iterator[Dict[str, Any]]]:
    """An OpenAI-style chat completion (llama-cpp-python's `Llama.create_chat_completion`):
    a `chat.completion` dict, or with `stream=True` an iterator of `chat.completion.chunk`
    dicts ending with one that carries `finish_reason`."""
    kw: Dict[str, Any] = dict(
        max_tokens=max_tokens,
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        min_p=min_p,
        repeat_penalty=repeat_penalty,
        seed=seed,
        stop=stop,
        json_schema=_schema(response_format),
    )
    cid = "chatcmpl-" + uuid.uuid4().hex
    created = int(time.time())
    if stream:
        return _chunks(model.chat_stream(messages, **kw), cid, created, model_name)
    text, finish, prompt_tokens, completion_tokens = model.chat_with_usage(messages, **kw)
    return {
        "id": cid,
        "object": "chat.completion",
        "created": created,
        "model": model_name,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": finish,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def _chunks(pieces: TokenStream, cid: str, created: int, name: str) -> Iterator[Dict[str, Any]]:
    def chunk(delta: Dict[str, Any], finish: Optional[str]) -> Dict[str, Any]:
        return {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": name,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    yield chunk({"role": "assistant", "content": ""}, None)
    for piece in pieces:
        yield chunk({"content": piece}, None)
    yield chunk({}, pieces.finish_reason or "stop")

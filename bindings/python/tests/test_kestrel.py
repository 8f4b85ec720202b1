"""kestrel's Python bindings on the real test models (`cargo xtask fetch-models`; the files are
found under $KESTREL_HOME/models, default ~/.cache/kestrel/models). `cargo xtask test` builds
and installs the package, then runs this file."""

import json
import os
import pathlib
import threading
import time

import pytest

import kestrel

MODELS = pathlib.Path(os.environ.get("KESTREL_HOME", pathlib.Path.home() / ".cache" / "kestrel")) / "models"
SMOL = MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA = MODELS / "gemma-3-270m-q4_k_m.gguf"


@pytest.fixture(scope="module")
def smol():
    if not SMOL.is_file():
        pytest.fail(f"{SMOL} is missing: run `cargo xtask fetch-models`")
    return kestrel.Model.load(str(SMOL), threads=2, n_ctx=1024)


def test_generate_is_deterministic_and_stops_at_max_tokens(smol):
    a = smol.generate("The capital of France is", max_tokens=8, temperature=0)
    b = smol.generate("The capital of France is", max_tokens=8, temperature=0)
    assert a == b and a.strip()
    assert len(smol.tokenize(a, add_bos=False)) <= 9


def test_tokenize_round_trip(smol):
    ids = smol.tokenize("Hello, world!", add_bos=False)
    assert ids and all(isinstance(i, int) for i in ids)
    assert smol.detokenize(ids) == "Hello, world!"


def test_stream_yields_before_the_end_and_equals_generate(smol):
    whole = smol.generate("Once upon a time", max_tokens=48, temperature=0)
    start = time.perf_counter()
    stream = smol.stream("Once upon a time", max_tokens=48, temperature=0)
    times, pieces = [], []
    for piece in stream:
        times.append(time.perf_counter())
        pieces.append(piece)
    assert "".join(pieces) == whole
    assert len(pieces) > 10
    # the first piece arrived well before the last one was generated
    assert times[0] - start < 0.5 * (times[-1] - start), (times[0] - start, times[-1] - start)
    assert stream.finish_reason in ("stop", "length")


def test_closing_a_stream_stops_it(smol):
    stream = smol.stream("Count from one to a thousand:", max_tokens=500, temperature=0)
    first = next(stream)
    assert isinstance(first, str)
    stream.close()
    assert list(stream) == []  # ended: nothing more comes
    assert stream.finish_reason == "cancelled"
    assert smol.generate("Hi", max_tokens=2, temperature=0) is not None


def test_other_python_threads_run_while_a_generation_streams(smol):
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.005)

    t = threading.Thread(target=ticker)
    t.start()
    start = time.perf_counter()
    pieces = list(smol.stream("Once upon a time, in a small village,", max_tokens=64, temperature=0))
    end = time.perf_counter()
    stop.set()
    t.join()
    during = [x for x in ticks if start <= x <= end]
    # the ticker ran throughout: at least a third of the 5 ms slots in the generation's time
    assert pieces
    assert len(during) >= (end - start) / 0.005 / 3, (len(during), end - start)


def test_chat_uses_the_template(smol):
    reply = smol.chat([{"role": "user", "content": "Say hello."}], max_tokens=16, temperature=0)
    assert isinstance(reply, str) and reply.strip()
    text, finish, prompt_tokens, completion_tokens = smol.chat_with_usage(
        [{"role": "user", "content": "Say hello."}], max_tokens=16, temperature=0
    )
    assert text == reply and finish in ("stop", "length")
    assert prompt_tokens > 5 and 0 < completion_tokens <= 16


def test_batch_equals_one_at_a_time(smol):
    prompts = ["The sky is", "Water boils at", "My favourite food is"]
    batch = smol.generate_batch(prompts, max_tokens=12, temperature=0)
    alone = [smol.generate(p, max_tokens=12, temperature=0) for p in prompts]
    assert batch == alone


def test_json_schema_output_is_valid(smol):
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
    }
    out = smol.chat(
        [{"role": "user", "content": "Describe a person as JSON."}],
        max_tokens=64,
        temperature=0,
        json_schema=schema,
    )
    value = json.loads(out)
    assert isinstance(value["name"], str) and isinstance(value["age"], int)


def test_embed(smol):
    one = smol.embed("a cat")
    two = smol.embed(["a cat", "a dog"])
    assert len(one) > 100 and all(isinstance(x, float) for x in one[:8])
    assert len(two) == 2 and two[0] == one


def test_create_chat_completion_in_openai_shape(smol):
    msgs = [{"role": "user", "content": "Name a colour."}]
    r = kestrel.create_chat_completion(smol, msgs, max_tokens=8, temperature=0)
    assert r["object"] == "chat.completion"
    assert r["choices"][0]["message"]["role"] == "assistant"
    assert r["usage"]["completion_tokens"] <= 8
    chunks = list(kestrel.create_chat_completion(smol, msgs, max_tokens=8, temperature=0, stream=True))
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text == r["choices"][0]["message"]["content"]


def test_missing_file_raises_model_not_found():
    with pytest.raises(kestrel.ModelNotFoundError):
        kestrel.Model.load("/nonexistent/model.gguf")
    assert issubclass(kestrel.ModelNotFoundError, FileNotFoundError)


def test_corrupt_file_raises_kestrel_error(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\xff" * 64)
    with pytest.raises(kestrel.KestrelError):
        kestrel.Model.load(str(bad))


@pytest.mark.parametrize(
    "kw",
    [
        {"max_tokens": 0},
        {"temperature": -1.0},
        {"top_p": 1.5},
        {"top_k": -3},
        {"json_schema": "{not json"},
        {"grammar": "root ::= undefined-rule"},
    ],
)
def test_bad_arguments_raise_invalid_argument(smol, kw):
    with pytest.raises(kestrel.InvalidArgumentError):
        smol.generate("Hi", **kw)
    assert issubclass(kestrel.InvalidArgumentError, ValueError)


def test_requests_that_do_not_fit_raise_invalid_argument(smol):
    with pytest.raises(kestrel.InvalidArgumentError, match="context"):
        smol.generate("word " * 2000, max_tokens=4)
    with pytest.raises(kestrel.InvalidArgumentError, match="empty"):
        smol.generate("")


def test_stop_takes_a_string_or_a_list(smol):
    a = smol.generate("1, 2, 3, 4,", max_tokens=12, temperature=0, stop="7")
    b = smol.generate("1, 2, 3, 4,", max_tokens=12, temperature=0, stop=["7"])
    assert a == b and "7" not in a


def test_unknown_keyword_is_a_type_error(smol):
    with pytest.raises(TypeError, match="temprature"):
        smol.generate("Hi", temprature=0.5)


def test_bad_messages_raise_invalid_argument(smol):
    with pytest.raises(kestrel.InvalidArgumentError):
        smol.chat([{"content": "no role"}])
    with pytest.raises(kestrel.InvalidArgumentError):
        smol.load(str(SMOL), threads=-1)


def test_gemma_loads_and_generates():
    if not GEMMA.is_file():
        pytest.fail(f"{GEMMA} is missing: run `cargo xtask fetch-models`")
    g = kestrel.Model.load(str(GEMMA), threads=2, n_ctx=512)
    assert g.device == "cpu" and g.n_ctx == 512
    assert g.chat([{"role": "user", "content": "Hi"}], max_tokens=8, temperature=0).strip()


def write_adapter(path, targets, seed, invocation=(), amplitude=0.1):
    """A rank-4 LoRA adapter for SmolLM2 (`targets`: (weight, in, out)), written as GGUF v3 by
    hand (llama.cpp's layout: `general.type = adapter`, `adapter.lora.alpha`, F32 `lora_a`
    [in, rank] and `lora_b` [rank, out]), activated by `invocation` when it is not empty."""
    import random
    import struct

    rng = random.Random(seed)
    rank = 4

    def text(s):
        b = s.encode()
        return struct.pack("<Q", len(b)) + b

    kv = [
        (b"general.architecture", 8, text("llama")),
        (b"general.type", 8, text("adapter")),
        (b"adapter.type", 8, text("lora")),
        (b"adapter.lora.alpha", 6, struct.pack("<f", 8.0)),
    ]
    if invocation:
        arr = struct.pack("<IQ", 4, len(invocation)) + struct.pack(f"<{len(invocation)}I", *invocation)
        kv.append((b"adapter.alora.invocation_tokens", 9, arr))
    tensors = []
    for name, k, m in targets:
        for half, dims in (("lora_a", (k, rank)), ("lora_b", (rank, m))):
            n = dims[0] * dims[1]
            data = struct.pack(f"<{n}f", *(rng.uniform(-amplitude, amplitude) for _ in range(n)))
            tensors.append((f"{name}.{half}", dims, data))
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv)))
    for key, ty, value in kv:
        out += struct.pack("<Q", len(key)) + key + struct.pack("<I", ty) + value
    offset = 0
    for name, dims, data in tensors:
        out += text(name) + struct.pack("<I", 2) + struct.pack("<QQ", *dims)
        out += struct.pack("<IQ", 0, offset)
        offset += (len(data) + 31) // 32 * 32
    out += b"\0" * (-len(out) % 32)
    for _, _, data in tensors:
        out += data + b"\0" * (-len(data) % 32)
    pathlib.Path(path).write_bytes(bytes(out))


LORA_TARGETS = [
    (f"blk.{layer}.{w}.weight", k, m)
    for layer in (0, 3, 7)
    for w, k, m in (("attn_q", 576, 576), ("attn_v", 576, 192), ("ffn_down", 1536, 576))
]


def test_lora_adapters_per_call_and_at_run_time(smol, tmp_path):
    path = tmp_path / "style.gguf"
    write_adapter(path, LORA_TARGETS, 7)
    m = kestrel.Model.load(str(SMOL), threads=2, n_ctx=512, lora=[(str(path), 1.0)])
    [info] = m.adapters()
    assert (info["id"], info["name"], info["scale"]) == (0, "style", 1.0)
    assert info["invocation_tokens"] == []
    prompt, kw = "The capital of France is", {"max_tokens": 8, "temperature": 0}
    base = smol.generate(prompt, **kw)
    adapted = m.generate(prompt, **kw)
    assert adapted != base
    assert m.generate(prompt, lora=[], **kw) == base
    assert m.generate(prompt, lora=[("style", 1.0)], **kw) == adapted
    assert m.generate(prompt, lora=[(0, 1.0)], **kw) == adapted
    m.set_adapter_scale("style", 0.0)
    assert m.adapters()[0]["scale"] == 0.0
    assert m.generate(prompt, **kw) == base
    with pytest.raises(kestrel.InvalidArgumentError, match="no LoRA adapter"):
        m.generate(prompt, lora=[("quiet", 1.0)], **kw)
    with pytest.raises(kestrel.InvalidArgumentError):
        m.generate(prompt, lora=[("style", float("nan"))], **kw)


def test_an_activated_lora_acts_only_where_the_prompt_invokes_it(smol, tmp_path):
    invoking = "Question: name a colour.\nAnswer:"
    ids = smol.tokenize(invoking, add_bos=False)
    path = tmp_path / "answer.gguf"
    write_adapter(path, LORA_TARGETS, 9, invocation=ids[-2:], amplitude=0.3)
    m = kestrel.Model.load(str(SMOL), threads=2, n_ctx=512, lora=[(str(path), 1.0)])
    assert m.adapters()[0]["invocation_tokens"] == ids[-2:]
    kw = {"max_tokens": 8, "temperature": 0}
    other = "The capital of France is"
    assert m.generate(other, **kw) == smol.generate(other, **kw)
    assert m.generate(invoking, **kw) != smol.generate(invoking, **kw)

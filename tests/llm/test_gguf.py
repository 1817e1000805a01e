"""The GGUF header reader: Nemotron-3-Nano's hybrid layer roles come from its per-layer arrays, and the reader
agrees with the `gguf` package on real files (the bundled SmolLM2 and a Nemotron-shaped fixture)."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from hsi_dagster.llm.gguf import ModelMetadata, read_metadata
from hsi_dagster.llm.model_files import bundled_smollm2_path
from tests.support.gguf_fixtures import ARCH, NEMOTRON_PATTERN, write_nemotron_gguf


@pytest.fixture(scope="module")
def nemotron_gguf(tmp_path_factory) -> Path:
    return write_nemotron_gguf(tmp_path_factory.mktemp("gguf") / "nemotron-fixture.gguf")


@pytest.fixture(scope="module")
def nemotron(nemotron_gguf) -> ModelMetadata:
    return read_metadata(nemotron_gguf)


def test_nemotron_layer_roles_come_from_the_per_layer_arrays(nemotron):
    assert nemotron.architecture == ARCH
    assert nemotron.attention_layers == tuple(i for i, c in enumerate(NEMOTRON_PATTERN) if c == "*")
    assert nemotron.recurrent_layers == tuple(i for i, c in enumerate(NEMOTRON_PATTERN) if c == "M")
    assert (len(nemotron.attention_layers), len(nemotron.recurrent_layers)) == (6, 23)
    assert nemotron.is_hybrid and nemotron.is_moe


@pytest.mark.parametrize("which", ["smollm2", "nemotron"])
def test_header_reader_agrees_with_the_gguf_package(which, nemotron_gguf):
    path = bundled_smollm2_path() if which == "smollm2" else nemotron_gguf
    ours = read_metadata(path)
    reference = gguf.GGUFReader(path)
    assert [(t.name, t.n_bytes) for t in ours.tensors] == [(t.name, int(t.n_bytes)) for t in reference.tensors]
    arch = ours.architecture
    assert ours.n_layer == reference.fields[f"{arch}.block_count"].contents()
    assert ours.n_embd == reference.fields[f"{arch}.embedding_length"].contents()
    head_count_kv = reference.fields[f"{arch}.attention.head_count_kv"].contents()
    assert list(ours.n_head_kv) == (
        head_count_kv if isinstance(head_count_kv, list) else [head_count_kv] * ours.n_layer
    )


def test_quantized_tensor_size_comes_from_its_block_layout(nemotron):
    sizes = {t.name: t.n_bytes for t in nemotron.tensors}
    assert sizes["blk.5.attn_k.weight"] == 4 * 34


def test_expert_tensors_and_layers_are_recognised_by_name(nemotron):
    by_name = {t.name: t for t in nemotron.tensors}
    assert by_name["blk.1.ffn_up_exps.weight"].is_expert and by_name["blk.1.ffn_up_exps.weight"].layer == 1
    assert not by_name["blk.1.ffn_up_shexp.weight"].is_expert  # the shared expert is not an --n-cpu-moe tensor
    assert by_name["token_embd.weight"].layer is None and by_name["output.weight"].layer is None


def test_fields_of_a_plain_transformer_have_no_recurrent_layers():
    meta = read_metadata(bundled_smollm2_path())
    assert meta.architecture == "llama" and meta.recurrent_layers == () and len(meta.attention_layers) == 30
    assert not meta.is_hybrid and not meta.is_moe and meta.n_ctx_train == 8192


def test_a_big_endian_file_reads_the_same(tmp_path):
    path = tmp_path / "be.gguf"
    writer = gguf.GGUFWriter(str(path), "llama", endianess=gguf.GGUFEndian.BIG)
    writer.add_block_count(2)
    writer.add_embedding_length(64)
    writer.add_head_count(4)
    writer.add_head_count_kv([2, 1])
    writer.add_tensor("blk.0.attn_k.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    meta = read_metadata(path)
    assert (meta.n_layer, meta.n_embd, meta.n_head_kv, meta.key_length) == (2, 64, (2, 1), 16)
    assert [(t.name, t.n_bytes) for t in meta.tensors] == [("blk.0.attn_k.weight", 128)]


def test_a_file_that_is_not_gguf_is_refused(tmp_path):
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"not a gguf at all")
    with pytest.raises(ValueError, match="not a GGUF"):
        read_metadata(bad)

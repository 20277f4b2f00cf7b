"""KV shape read from a local config.json (transformers AutoConfig, offline), as the APC replay sizes it."""
from __future__ import annotations

import json

import pytest

from advisor.errors import TokenizerError
from advisor.modelinfo import kv_shape


def write_config(folder, **fields):
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(fields))
    return folder


def test_gqa_model(tmp_path):
    """Llama-3-8B's shape: 32 layers, 8 KV heads of 128, bf16 -> 128 KiB per token, 32 KiB at TP 4."""
    folder = write_config(tmp_path / "llama", model_type="llama", num_hidden_layers=32, num_attention_heads=32,
                          num_key_value_heads=8, hidden_size=4096, torch_dtype="bfloat16")
    shape = kv_shape(folder)
    assert (shape.num_layers, shape.num_kv_heads, shape.head_dim, shape.dtype_bytes) == (32, 8, 128, 2)
    assert shape.bytes_per_token() == 131072 and shape.bytes_per_token(4) == 32768
    assert kv_shape(folder, kv_cache_dtype="fp8").bytes_per_token() == 65536


def test_mla_model(tmp_path):
    """DeepSeek-V3: 61 layers x (kv_lora_rank 512 + rope 64) x 2 bytes, whatever the TP."""
    folder = write_config(tmp_path / "dsv3", model_type="deepseek_v3", num_hidden_layers=61, num_attention_heads=128,
                          num_key_value_heads=128, hidden_size=7168, kv_lora_rank=512, qk_rope_head_dim=64,
                          torch_dtype="bfloat16")
    shape = kv_shape(folder)
    assert shape.kv_lora_rank == 512 and shape.bytes_per_token(8) == 61 * 576 * 2


def test_missing_model_is_an_error(tmp_path):
    with pytest.raises(TokenizerError):
        kv_shape(tmp_path / "absent")

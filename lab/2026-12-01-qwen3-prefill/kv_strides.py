"""Strides of q, k and v as transformers' Qwen3 attention hands them to flashrepro (CPU, tiny
config, fp16, prefill with use_cache=False and with the default cache).

    PYTHONPATH=src python lab/2026-12-01-qwen3-prefill/kv_strides.py
"""

import os

os.environ["TRITON_INTERPRET"] = "1"  # before flashrepro is imported: kernels on the CPU

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

import flashrepro
import flashrepro.integrations.transformers as integ

seen = []
real = flashrepro.attention


def spy(q, k, v, **kw):
    seen.append((q.stride(), k.stride(), v.stride(), q.is_contiguous(), k.is_contiguous()))
    return real(q, k, v, **kw)


integ.flashrepro.attention = spy
cfg = Qwen3Config(vocab_size=128, hidden_size=256, intermediate_size=512, num_hidden_layers=1,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=64)
model = Qwen3ForCausalLM(cfg).half().eval()
model.set_attn_implementation(integ.NAME)
with torch.inference_mode():
    for use_cache in (False, True):
        model(torch.randint(0, 128, (2, 16)), use_cache=use_cache)
print("q strides, k strides, v strides, q contiguous, k contiguous; use_cache False, then True")
for row in seen:
    print(row)

"""Integrations of :func:`flashrepro.attention` into model libraries (optional extras).

``flashrepro.integrations.transformers`` (extra ``models``): the attention function of
Hugging Face transformers' ``AttentionInterface``, ``attn_implementation="frepro"``.
Nothing here is imported by ``import flashrepro``.
"""

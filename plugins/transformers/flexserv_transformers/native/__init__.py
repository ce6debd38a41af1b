"""FlexServ's own forward passes for model families the paged engine runs often.

They compute exactly what transformers' modelling code computes (same operations,
dtypes and order, so logits are bit-identical) without importing it: that code
costs seconds of start-up and a large part of the resident memory, and the paged
engine only needs a plain forward over its own attention.
"""

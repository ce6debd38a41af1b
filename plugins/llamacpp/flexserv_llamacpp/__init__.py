"""FlexServ plugin: GGUF text generation through llama.cpp (llama-cpp-python's C API).

One engine thread per model runs every sequence in one ``llama_decode`` per step
(continuous batching over llama.cpp's unified multi-sequence KV cache), reuses
the KV of prompt prefixes across requests and samples in numpy with the same
semantics as the transformers backend. Importing it is cheap: the binding loads
with the first model.
"""

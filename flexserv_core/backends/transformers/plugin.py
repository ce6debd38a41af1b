"""Default plugin: text generation with transformers. (Being written.)"""

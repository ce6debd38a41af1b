"""FlexServ plugin: image input for vision-language models (fetching and decoding ``image_url`` parts)."""

__version__ = "0.1.0"

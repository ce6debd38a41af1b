"""FlexServ chat-template variables: ``chat_template_kwargs`` and ``enable_thinking``."""

from flexserv_template_kwargs.merge import RESERVED_KEYS, merge_template_kwargs, request_template_kwargs
from flexserv_template_kwargs.settings import TemplateKwargsSettings

__all__ = ["RESERVED_KEYS", "TemplateKwargsSettings", "merge_template_kwargs", "request_template_kwargs"]

"""FlexServ chat-template variables: ``chat_template_kwargs`` and ``enable_thinking``."""

from flexserv_template_kwargs.merge import request_template_kwargs
from flexserv_template_kwargs.settings import TemplateKwargsSettings

__all__ = ["TemplateKwargsSettings", "request_template_kwargs"]

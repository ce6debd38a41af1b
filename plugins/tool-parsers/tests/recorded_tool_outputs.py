"""Tool-call outputs recorded from real models, shared by the parser tests (whole
outputs) and the streaming tests (the same outputs fed in pieces)."""

# Qwen2.5-7B-Instruct, two parallel calls (recorded, whitespace as emitted).
QWEN = (
    "<tool_call>\n"
    '{"name": "get_current_temperature", "arguments": {"location": "San Francisco, CA, USA", "unit": "celsius"}}\n'
    "</tool_call>\n"
    "<tool_call>\n"
    '{"name": "get_temperature_date", "arguments": {"location": "San Francisco, CA, USA", "date": "2024-10-01", "unit": "celsius"}}\n'
    "</tool_call>"
)
# Hermes-2-Pro-Llama-3-8B: a thought before the call.
HERMES = (
    "Let me look that up for you.\n<tool_call>\n"
    "{'arguments': {'symbol': 'TSLA'}, 'name': 'get_stock_fundamentals'}\n</tool_call>\n"
    '<tool_call>\n{"arguments": {"symbol": "TSLA"}, "name": "get_stock_price"}\n</tool_call>'
)
# Llama-3.1-8B-Instruct (JSON tool calling, with and without the python tag).
LLAMA = '{"name": "get_weather", "parameters": {"city": "Paris", "unit": "celsius"}}'
LLAMA_TAGGED = '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Oslo"}}; {"name": "get_time", "parameters": {"city": "Oslo"}}'
# Mistral-7B-Instruct-v0.3.
MISTRAL = (
    '[TOOL_CALLS] [{"name": "get_current_weather", "arguments": {"location": "Paris, France", "format": "celsius"}}]'
)

"""Testing kit for FlexServ and its plugins (also a pytest plugin)."""

"""One module per wire protocol. Each knows its format and nothing about experiments."""

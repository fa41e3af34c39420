"""Command-line interface: thin commands that parse options, call one function and map errors."""

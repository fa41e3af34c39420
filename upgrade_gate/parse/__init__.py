"""Pure parsers, one module per tool: text in, typed value out, or `ParseError`. No I/O."""

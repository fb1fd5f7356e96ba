"""Tools that render or drive plans: the command line, the demo, conversion, verify, explain,
display and progress. Nothing below this package imports it."""

"""The `netcomp` command: the parser (parser.py), exit codes (exits.py), one module per group of commands, and
main.py, which dispatches and keeps tracebacks from the user."""

"""Holds the `netcomp` command: its parser, its exit codes, a module per group of commands, and main.py, which
dispatches and keeps tracebacks from the user."""

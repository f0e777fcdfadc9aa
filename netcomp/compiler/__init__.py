"""Intents to CNI conflists on disk: the incremental Compiler renders each intent through its backend's template
into a Plan, and the pipeline the CLI and the daemon both run writes it to the output dir."""

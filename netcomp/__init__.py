"""netcomp: a declarative network-intent compiler and CNI delegation host service."""

__version__ = "0.1.0"

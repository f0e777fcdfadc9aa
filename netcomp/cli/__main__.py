"""Runs `python3 -m netcomp.cli`, as the Debian package's /usr/bin/netcomp does."""

from netcomp.cli.exits import EX_INTERRUPTED

try:
    from netcomp.cli.main import main
except KeyboardInterrupt:  # Ctrl-C while the command is still being imported: as quiet as during its run
    raise SystemExit(EX_INTERRUPTED) from None

raise SystemExit(main())

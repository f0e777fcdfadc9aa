"""`python3 -m netcomp.cli` (the Debian package's /usr/bin/netcomp runs it so)."""

from netcomp.cli.main import main

raise SystemExit(main())

"""Names the exit codes of the `netcomp` command, in one place, as sysexits(3) does where it has a word."""

EX_OK = 0
EX_FAIL = 1  # the command ran and the answer is no: compile --check found changes, attachments found an
# unreadable entry, the daemon refused the request
EX_USAGE = 64  # the command line is wrong
EX_DATAERR = 65  # an intent or netcomp.yaml has errors
EX_NOINPUT = 66  # a path named on the command line does not exist
EX_UNAVAILABLE = 69  # the daemon does not answer
EX_SOFTWARE = 70  # a bug in netcomp
EX_CANTCREAT = 73  # install-shim cannot write its files
EX_IOERR = 74  # an output file cannot be written
EX_NOPERM = 77  # the daemon's socket is root-only (or only for allowedUids)
EX_INTERRUPTED = 130  # Ctrl-C (SIGINT), as shells report it: 128 + 2
EX_PIPE = 141  # the reader went away (SIGPIPE), as shells report it: 128 + 13

"""The host daemon: compiles intents, serves CNI delegation on a unix socket, reloads on SIGHUP."""

"""Running CNI plugins (libcni's job): find a plugin by plain name in the plugin dirs, exec it with a scrubbed
environment, no shell and a timeout, and run a conflist as the CNI spec says (Section 5: "Execution of network
configurations": ADD in order chaining prevResult, DEL in reverse, CHECK with the cached result).

Process creation goes through an `Exec` (as libcni's invoke.Exec), so callers can wrap it (run in a netns, count
calls); tests that need the real thing use the real plugins."""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from netcomp.cni import spawn
from netcomp.cni.codes import E_INVALID_CONFIG, E_OTHER
from netcomp.cni.spec import DEFAULT_VERSION, compact, loads
from netcomp.errors import DelegateError, printable
from netcomp.fsutil import read_bounded
from netcomp.names import is_cni_name

log = logging.getLogger("netcomp.cni")
DEFAULT_TIMEOUT = 60.0
SAFE_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
# CNI spec error codes (Section "Error"): 1 incompatible version, 4 invalid config, 7 invalid env, 11 try later.


@dataclass(frozen=True, slots=True)
class ExecResult:
    returncode: int
    stdout: bytes
    stderr: bytes


class Exec(Protocol):
    def __call__(self, argv: Sequence[str], env: Mapping[str, str], stdin: bytes, timeout: float) -> ExecResult: ...


def real_exec(argv: Sequence[str], env: Mapping[str, str], stdin: bytes, timeout: float) -> ExecResult:
    """Exec `argv[0]` with exactly `env`, `stdin` on its stdin, and its stdout and stderr captured; killed after
    `timeout` seconds with every process it started that is still in its process group. No shell, no PATH
    lookup.

    posix_spawn(3) and one poll loop rather than subprocess.run: on the path of every ADD and DEL, measured here
    per plugin exec, this costs the daemon 0.3 ms of CPU instead of 0.6 and answers 0.7-0.9 ms sooner
    (bench/spawn.py); spawned with the GIL released (spawn.py says why). What subprocess does for us is done
    here too: the child gets only fds 0-2 (every fd the daemon opens is close-on-exec, PEP 446, and `seal_fds`
    makes those it inherited so), the signals Python ignores (SIGPIPE, SIGXFSZ) back at their defaults, an empty
    signal mask, and no deadlock however much it reads or writes. Its stdin is in the pipe before it starts (as
    much as the pipe holds: a config is a few KiB, a pipe 64): the plugin never waits for the daemon to write."""
    if not os.path.isabs(argv[0]):  # never resolved against the cwd or a PATH
        raise DelegateError(E_OTHER, f"cannot execute {argv[0]!r}: not an absolute path")
    deadline = time.monotonic() + timeout
    in_r, in_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
    out_r, out_w = os.pipe2(os.O_CLOEXEC)
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    try:
        os.set_blocking(in_r, True)  # the plugin's end: a plain blocking stdin
        left = _prefill(in_w, stdin)
        pid = spawn.posix_spawn(
            argv[0],
            argv,
            env,
            file_actions=[(os.POSIX_SPAWN_DUP2, fd, n) for n, fd in enumerate((in_r, out_w, err_w))],
            setsigdef=_SIGDEF,
            setsigmask=(),
            setpgroup=0,  # its own process group: a timeout kills what it started too (bridge's IPAM plugin)
        )
    except (OSError, ValueError) as e:  # ValueError: a NUL byte in an argument or the environment
        for fd in (in_r, in_w, out_r, out_w, err_r, err_w):
            os.close(fd)
        raise DelegateError(E_OTHER, f"cannot execute: {getattr(e, 'strerror', None) or e}") from None
    for fd in (in_r, out_w, err_w):
        os.close(fd)
    try:
        out, err = _communicate(in_w, out_r, err_r, left, deadline)
    except TimeoutError:
        _kill(pid)
        raise DelegateError(E_OTHER, f"timed out after {timeout:g}s") from None
    except _TooMuch:
        _kill(pid)
        raise DelegateError(E_OTHER, f"printed more than {MAX_STDOUT >> 20} MiB on stdout; killed") from None
    except BaseException:
        _kill(pid)
        raise
    _, status = os.waitpid(pid, 0)
    return ExecResult(os.waitstatus_to_exitcode(status), out, err)


def _prefill(fd: int, data: bytes) -> memoryview:
    """Write what the (non-blocking) pipe takes of data now; what is left."""
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view[:65536]) :]
    except BlockingIOError:
        pass
    return view


def _kill(pid: int) -> None:
    """Kill the plugin and whatever it started that is still in its process group, and reap the plugin."""
    for kill in (os.killpg, os.kill):  # the plugin itself even if its group is somehow gone
        with contextlib.suppress(ProcessLookupError):
            kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


# A result is a few KiB; a plugin printing without end must not exhaust the daemon's memory. Of stderr only the
# tail is kept (the log and the error's details show its end).
MAX_STDOUT, STDERR_TAIL = 16 << 20, 64 << 10


class _TooMuch(Exception):
    pass


_SIGDEF = tuple(getattr(signal, n) for n in ("SIGPIPE", "SIGXFSZ") if hasattr(signal, n))


def _communicate(in_w: int, out_r: int, err_r: int, view: memoryview, deadline: float) -> tuple[bytes, bytes]:
    """Feed what is left of the child's stdin (`in_w` non-blocking) and read its stdout and stderr until both
    close; closes all three fds. TimeoutError when the deadline passes first, _TooMuch when stdout passes
    MAX_STDOUT."""
    got: dict[int, list[bytes]] = {out_r: [], err_r: []}
    size = {out_r: 0, err_r: 0}
    reading = {out_r, err_r}
    writing: set[int] = set()
    poller = select.poll()
    for fd in reading:
        poller.register(fd, select.POLLIN)
    if view:
        writing.add(in_w)
        poller.register(in_w, select.POLLOUT)
    else:
        os.close(in_w)  # all of it is in the pipe: the child reads it, then EOF
    try:
        while reading or writing:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            for fd, _ in poller.poll(max(1, int(left * 1000))):
                if fd in writing:
                    try:
                        view = view[os.write(fd, view[:65536]) :] if view else view
                    except BlockingIOError:  # full again: poll said writable, someone else wrote first
                        continue
                    except BrokenPipeError:  # the child stopped reading; what it says is still wanted
                        view = view[:0]
                    if not view:
                        poller.unregister(fd)
                        writing.discard(fd)
                        os.close(fd)
                    continue
                block = os.read(fd, 65536)
                if block:
                    got[fd].append(block)
                    size[fd] += len(block)
                    if fd == out_r and size[fd] > MAX_STDOUT:
                        raise _TooMuch
                    if fd == err_r and size[fd] > 2 * STDERR_TAIL:
                        tail = b"".join(got[fd])[-STDERR_TAIL:]
                        got[fd], size[fd] = [tail], len(tail)
                else:
                    poller.unregister(fd)
                    reading.discard(fd)
    finally:
        for fd in (*writing, out_r, err_r):
            os.close(fd)
    return b"".join(got[out_r]), b"".join(got[err_r])[-STDERR_TAIL:]


def seal_fds() -> None:
    """Called once as the daemon starts. Make every fd above 2 it inherited close-on-exec (a socket from
    systemd, anything a parent left open), so that no plugin sees one; Python opens its own fds so already
    (PEP 446). And make sure 0-2 are open (on /dev/null if not): otherwise a pipe of real_exec's could get one
    of those numbers and be overwritten by another when the child's stdio is set up."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            opened = os.open(os.devnull, os.O_RDWR)  # the lowest free number: this one
            if opened != fd:
                os.close(opened)
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2:
            with contextlib.suppress(OSError):  # the listing's own fd, closed by now
                os.set_inheritable(fd, False)


MARKER_ENV = "NETCOMP_DELEGATE_OF"


def kill_marked(marker: str, *, rounds: int = 20) -> int:
    """Kill every process whose environment carries MARKER_ENV=marker (with its process group): delegates a
    daemon of the same cache dir started and that outlived it (they run in process groups of their own, so a
    SIGKILL of the daemon does not reach them). Called before anything else at start-up, so that no delegate
    from before a crash races the DELs that undo its ADD. Under systemd the unit's cgroup is emptied before a
    restart anyway; this makes it so outside systemd too. Returns how many were killed."""
    needle = f"{MARKER_ENV}={marker}".encode()
    me = os.getpid()
    killed = 0
    for _ in range(rounds):  # again until a scan finds none: one may have been exec'ing during the last
        found = []
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == me:
                continue
            try:
                env = read_bounded(f"/proc/{name}/environ", 1 << 20)
            except OSError:  # gone, a kernel thread, not ours to read, or not what a delegate's is
                continue
            if needle in env.split(b"\0"):
                found.append(int(name))
        if not found:
            return killed
        for pid in found:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
            killed += 1
        # Zombies keep their environ readable until reaped by whoever is their parent now; wait for them
        # to go (bounded), so the next scan does not count them again.
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and any(_alive(pid) for pid in found):
            time.sleep(0.01)
    return killed


def _alive(pid: int) -> bool:
    """Not yet dead or a zombie."""
    try:
        state = read_bounded(f"/proc/{pid}/stat", 1 << 16).rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")


@dataclass(frozen=True, slots=True)
class RuntimeConf:
    """What the runtime says about one attachment (CNI_* variables and runtimeConfig)."""

    container_id: str
    netns: str
    ifname: str
    args: str = ""  # CNI_ARGS
    capability_args: Mapping[str, Any] = field(default_factory=dict)


def find_plugin(name: str, dirs: Sequence[str | Path]) -> str:
    """The plugin's path: a plain file name looked up in the plugin dirs, never a path."""
    if not is_cni_name(name):  # a plain file name: no '/', and '.'/'..' cannot match
        raise DelegateError(E_INVALID_CONFIG, f"plugin type {name!r} is not a plain plugin name")
    for d in dirs:
        p = os.path.join(d, name)  # str, not Path: on the path of every exec
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    raise DelegateError(E_INVALID_CONFIG, f"failed to find plugin {name!r} in path {list(map(str, dirs))}")


# A result is written again (the next plugin's prevResult, the cache, the answer): orjson writes 255 levels at
# most and the stdlib's encoder about 990, and a CNI result has 4. Deeper is refused as the plugin's error, before
# anything records it.
MAX_RESULT_DEPTH = 64


def _deeper(value: Any, limit: int) -> bool:
    """Whether value nests containers deeper than limit (the top level is 1)."""
    todo: list[tuple[Any, int]] = [(value, 1)]
    while todo:
        v, depth = todo.pop()
        if isinstance(v, dict | list):
            if depth > limit:
                return True
            todo.extend((x, depth + 1) for x in (v.values() if isinstance(v, dict) else v))
    return False


class Runner:
    """Runs plugins and conflists for one set of plugin dirs."""

    def __init__(
        self,
        plugin_dirs: Sequence[str | Path],
        *,
        exec_: Exec = real_exec,
        timeout: float = DEFAULT_TIMEOUT,
        marker: str = "",
    ) -> None:
        """`marker`: the value of MARKER_ENV every plugin gets (and passes on to what it starts), so that a
        daemon starting after a crash can find its predecessor's delegates (kill_marked)."""
        self.plugin_dirs = [str(d) for d in plugin_dirs]
        self.exec = exec_
        self.timeout = timeout
        self.marker = marker

    def env(self, command: str, rt: RuntimeConf | None) -> dict[str, str]:
        # Scrubbed: nothing of the daemon's own environment (NOTIFY_SOCKET, credentials) reaches a plugin.
        env = {"CNI_COMMAND": command, "CNI_PATH": ":".join(self.plugin_dirs), "PATH": SAFE_PATH}
        if self.marker:
            env[MARKER_ENV] = self.marker
        if rt is not None:
            env.update(CNI_CONTAINERID=rt.container_id, CNI_NETNS=rt.netns, CNI_IFNAME=rt.ifname, CNI_ARGS=rt.args)
        return env

    def exec_plugin(
        self, plugin: Mapping[str, Any], command: str, rt: RuntimeConf | None, network: str = ""
    ) -> dict[str, Any] | None:
        """Exec one plugin with its full config on stdin; its result (None when it prints nothing)."""
        ptype = str(plugin.get("type", ""))
        try:
            path = find_plugin(ptype, self.plugin_dirs)
            res = self.exec([path], self.env(command, rt), compact(plugin), self.timeout)
        except DelegateError as e:
            raise DelegateError(e.code, e.msg, e.details, network=network, plugin=ptype) from None
        if res.stderr:
            # What a plugin says on stderr goes to the log (journalctl -u netcomp), with whose it was.
            level = logging.WARNING if res.returncode != 0 else logging.DEBUG
            log.log(
                level,
                "%s %s (network %s) stderr: %s",
                ptype,
                command,
                network or "-",
                printable(res.stderr.decode(errors="replace").strip()[-2000:]),
            )
        if res.returncode != 0:
            raise _plugin_error(res, network, ptype)
        if not res.stdout.strip():
            return None
        try:
            out = loads(res.stdout)
        except ValueError:
            raise DelegateError(
                E_OTHER,
                "plugin printed a result that is not JSON",
                res.stdout[:200].decode(errors="replace"),
                network=network,
                plugin=ptype,
            ) from None
        if not isinstance(out, dict):
            raise DelegateError(E_OTHER, "plugin result is not a JSON object", network=network, plugin=ptype)
        # Counting brackets is C-fast and bounds the depth: only a result with many is walked.
        if res.stdout.count(b"[") + res.stdout.count(b"{") > MAX_RESULT_DEPTH and _deeper(out, MAX_RESULT_DEPTH):
            raise DelegateError(
                E_OTHER,
                f"plugin result is nested deeper than {MAX_RESULT_DEPTH} levels",
                network=network,
                plugin=ptype,
            )
        return out

    @staticmethod
    def plugin_config(
        conflist: Mapping[str, Any],
        plugin: Mapping[str, Any],
        prev: Mapping[str, Any] | None,
        rt: RuntimeConf | None,
    ) -> dict[str, Any]:
        """A plugin's stdin: its own keys plus name, cniVersion, prevResult and the runtimeConfig of the
        capabilities it declares (CNI spec, "Deriving execution configuration from plugin configuration")."""
        conf = dict(plugin)
        conf["name"] = conflist["name"]
        conf["cniVersion"] = conflist.get("cniVersion", DEFAULT_VERSION)
        caps = plugin.get("capabilities")
        if rt is not None and isinstance(caps, dict):
            runtime = {k: v for k, v in rt.capability_args.items() if caps.get(k)}
            if runtime:
                conf["runtimeConfig"] = runtime
        if prev is not None:
            conf["prevResult"] = prev
        else:
            conf.pop("prevResult", None)
        return conf

    def add(self, conflist: Mapping[str, Any], rt: RuntimeConf) -> dict[str, Any]:
        prev: dict[str, Any] | None = None
        for plugin in conflist["plugins"]:
            out = self.exec_plugin(self.plugin_config(conflist, plugin, prev, rt), "ADD", rt, conflist["name"])
            if out is None:
                raise DelegateError(
                    E_OTHER,
                    "ADD printed no result",
                    network=conflist["name"],
                    plugin=str(plugin.get("type")),
                )
            prev = out
        assert prev is not None, "a conflist has at least one plugin"
        return prev

    def check(self, conflist: Mapping[str, Any], rt: RuntimeConf, result: Mapping[str, Any]) -> None:
        if conflist.get("disableCheck"):
            return
        for plugin in conflist["plugins"]:
            self.exec_plugin(self.plugin_config(conflist, plugin, result, rt), "CHECK", rt, conflist["name"])

    def delete(self, conflist: Mapping[str, Any], rt: RuntimeConf, result: Mapping[str, Any] | None) -> None:
        """DEL every plugin in reverse order. Plugins must tolerate a DEL of what was never added (spec)."""
        for plugin in reversed(conflist["plugins"]):
            self.exec_plugin(self.plugin_config(conflist, plugin, result, rt), "DEL", rt, conflist["name"])

    def version(self, plugin_type: str) -> dict[str, Any]:
        out = self.exec_plugin({"type": plugin_type, "cniVersion": DEFAULT_VERSION}, "VERSION", None)
        return out or {}


def _plugin_error(res: ExecResult, network: str, plugin: str) -> DelegateError:
    """The plugin's own CNI error, verbatim, or one made from its exit status and stderr."""
    try:
        err = loads(res.stdout)
    except ValueError:
        err = None
    if isinstance(err, dict) and "code" in err:
        try:
            code = int(err.get("code", E_OTHER))
        except (TypeError, ValueError):
            code = E_OTHER
        return DelegateError(code, str(err.get("msg", "")), str(err.get("details", "")), network=network, plugin=plugin)
    tail = res.stderr.decode(errors="replace").strip()[-500:]
    return DelegateError(E_OTHER, f"plugin exited with status {res.returncode}", tail, network=network, plugin=plugin)

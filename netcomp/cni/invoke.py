"""This module runs CNI plugins, as libcni does: it finds a plugin by plain name in the plugin dirs, execs it
through an `Exec` (cni/process.py) with a scrubbed environment, and runs a conflist as the CNI spec's Section 5
says (ADD in order chaining prevResult, DEL in reverse, CHECK with the cached result)."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from netcomp.cni.codes import E_INCOMPATIBLE, E_INVALID_CONFIG, E_INVALID_ENV, E_OTHER
from netcomp.cni.process import MARKER_ENV, exec_problem

# The process half (cni/process.py), re-exported: callers run plugins through this module.
from netcomp.cni.process import MAX_STDOUT as MAX_STDOUT
from netcomp.cni.process import STDERR_TAIL as STDERR_TAIL
from netcomp.cni.process import Exec as Exec
from netcomp.cni.process import ExecResult as ExecResult
from netcomp.cni.process import kill_marked as kill_marked
from netcomp.cni.process import real_exec as real_exec
from netcomp.cni.process import seal_fds as seal_fds
from netcomp.cni.spec import DEFAULT_VERSION, compact, loads, plugin_types, too_deep
from netcomp.errors import DelegateError, printable
from netcomp.names import is_cni_name

log = logging.getLogger("netcomp.cni")
DEFAULT_TIMEOUT = 60.0
SAFE_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


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


# A result is written again (the next plugin's prevResult, the record, the answer), and orjson writes at most 255
# levels (a CNI result has 4): deeper is the plugin's error, refused before anything records it.
MAX_RESULT_DEPTH = 64


class Runner:
    """Runs plugins and conflists for one set of plugin dirs."""

    def __init__(
        self,
        plugin_dirs: Sequence[str | Path],
        *,
        exec_: Exec = real_exec,
        timeout: float = DEFAULT_TIMEOUT,
        marker: str = "",
        observe: Callable[[str, str, float, bool], object] = lambda plugin, verb, seconds, ok: None,
    ) -> None:
        """`marker`: the value of MARKER_ENV every plugin gets (and passes on to what it starts), so that a
        daemon starting after a crash can find its predecessor's delegates (kill_marked). `observe` is told of
        each exec: the plugin, the verb, how long it took and whether it succeeded (the daemon's metrics)."""
        self.plugin_dirs = [str(d) for d in plugin_dirs]
        self.exec = exec_
        self.observe = observe
        self.timeout = timeout
        self.marker = marker
        # What each plugin binary says it speaks (VERSION), by its path and stat: asked once per binary.
        self._versions: dict[tuple[str, int, int, int], tuple[str, ...]] = {}
        self._versions_lock = threading.Lock()

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
            t = time.perf_counter()
            try:
                res = self.exec([path], self.env(command, rt), compact(plugin), self.timeout)
            except Exception:
                self.observe(ptype, command, time.perf_counter() - t, False)
                raise
            self.observe(ptype, command, time.perf_counter() - t, res.returncode == 0)
        except DelegateError as e:
            raise DelegateError(
                e.code, e.msg, e.details, network=network, plugin=ptype, permanent=e.permanent
            ) from None
        if res.stderr:
            # What a plugin says on stderr goes to the log (journalctl -u netcomp), with whose it was.
            level = logging.WARNING if res.returncode != 0 else logging.DEBUG
            said = printable(res.stderr.decode(errors="replace").strip()[-2000:])
            log.log(level, "%s %s (network %s) stderr: %s", ptype, command, network or "-", said)
        if res.returncode != 0:
            raise _plugin_error(res, network, ptype)
        if not res.stdout.strip():
            return None

        def bad(msg: str, details: str = "") -> DelegateError:
            return DelegateError(E_OTHER, msg, details, network=network, plugin=ptype)

        try:
            out = loads(res.stdout)
        except ValueError:
            raise bad("plugin printed a result that is not JSON", res.stdout[:200].decode(errors="replace")) from None
        if not isinstance(out, dict):
            raise bad("plugin result is not a JSON object")
        # Counting brackets is C-fast and bounds the depth: only a result with many is walked.
        if res.stdout.count(b"[") + res.stdout.count(b"{") > MAX_RESULT_DEPTH and too_deep(out, MAX_RESULT_DEPTH):
            raise bad(f"plugin result is nested deeper than {MAX_RESULT_DEPTH} levels")
        return out

    @staticmethod
    def plugin_config(
        conflist: Mapping[str, Any], plugin: Mapping[str, Any], prev: Mapping[str, Any] | None, rt: RuntimeConf | None
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
                    E_OTHER, "ADD printed no result", network=conflist["name"], plugin=str(plugin.get("type"))
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

    def supported_versions(self, plugin_type: str) -> tuple[str, ...] | None:
        """The CNI versions a plugin says it speaks (its VERSION's supportedVersions), asked once per binary (by
        path and stat: an upgraded plugin is asked again); None when it is not installed or does not say."""
        try:
            path = find_plugin(plugin_type, self.plugin_dirs)
            st = os.stat(path)
        except (DelegateError, OSError):
            return None
        key = (path, st.st_ino, st.st_mtime_ns, st.st_size)
        with self._versions_lock:
            known = self._versions.get(key)
        if known is None:
            try:
                said = self.version(plugin_type).get("supportedVersions")
            except DelegateError:
                said = None
            ok = isinstance(said, list) and all(isinstance(v, str) for v in said)
            known = tuple(said) if ok and said else ()
            with self._versions_lock:
                self._versions[key] = known
        return known or None

    def preflight(self, conflist: Mapping[str, Any], rt: RuntimeConf) -> None:
        """Refuse (DelegateError, permanent), before anything runs, what would make every exec of the conflist
        fail, and the DEL of its rollback too: an environment the kernel cannot exec (process.exec_problem), a
        cniVersion one of its plugins (or their IPAM plugins) says it does not speak."""
        network = str(conflist.get("name", ""))
        why = exec_problem([], self.env("ADD", rt))
        if why is not None:
            raise DelegateError(
                E_INVALID_ENV, f"cannot run its plugins: {why}", "no plugin was run", network=network, permanent=True
            )
        version = str(conflist.get("cniVersion", DEFAULT_VERSION))
        for ptype in plugin_types(dict(conflist)):
            speaks = self.supported_versions(ptype)
            if speaks is not None and version not in speaks:
                raise DelegateError(
                    E_INCOMPATIBLE,
                    f"incompatible CNI versions: the network's config is {version}, the plugin speaks "
                    + ", ".join(speaks),
                    "no plugin was run",
                    network=network,
                    plugin=ptype,
                    permanent=True,
                )


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
        # A plugin refusing the config's version refuses it every time (CNI spec, "Error": code 1).
        return DelegateError(
            code,
            str(err.get("msg", "")),
            str(err.get("details", "")),
            network=network,
            plugin=plugin,
            permanent=code == E_INCOMPATIBLE,
        )
    tail = res.stderr.decode(errors="replace").strip()[-500:]
    return DelegateError(E_OTHER, f"plugin exited with status {res.returncode}", tail, network=network, plugin=plugin)

"""The Daemon: its parts wired together (each built from the settings by wiring.py), the reload that compiles and
keeps the last good version of what an edit broke, start-up recovery, status, stop. The process around it
(signals, the main loop) is run.py's."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from netcomp import __version__, faults, foreign, libc, report
from netcomp.cluster.podsync import PodSync
from netcomp.cni.invoke import Exec, kill_marked, real_exec
from netcomp.daemon import wiring
from netcomp.daemon.addresses import CLUSTER_GC_EVERY, Addresses
from netcomp.daemon.compiles import Compiles, log_changes, write_kept
from netcomp.daemon.notify import Notifier
from netcomp.daemon.server import handlers, protocol
from netcomp.daemon.server.server import Server, listen
from netcomp.daemon.state import Snapshot, State, StateFile
from netcomp.daemon.tenantids import TenantIds
from netcomp.daemon.watch import Watcher
from netcomp.errors import Diagnostic, HostError
from netcomp.metrics import Metrics
from netcomp.records.files import Records
from netcomp.records.record import Record
from netcomp.settings import Settings

log = logging.getLogger("netcomp.daemon")
STATUS_EVERY = 5.0  # seconds between STATUS= refreshes from the serving loop
UNDO_RETRY_EVERY = 300.0  # seconds between tries to finish rollbacks that failed (delegate/deleting.py)
DRAIN_SECONDS = 30.0


class Daemon:
    def __init__(
        self,
        load_settings: Callable[[], Settings],
        *,
        exec_: Exec = real_exec,
        link_netns: str | None = None,
        state_path: Path | None = None,
        environ: Mapping[str, str] = os.environ,
    ) -> None:
        """`link_netns`: the named network namespace where the delegates run and host links are made; None for
        the daemon's own. `state_path`: the last good state (daemon/state.py), which makes a broken netcomp.yaml
        at start not fatal. IntentError when netcomp.yaml is broken and there is no last good state to run with."""
        faults.arm(environ)  # the chaos run's NETCOMP_CRASH_AT, if any (ValueError when it names no point)
        self.load_settings = load_settings
        self.state_file = StateFile(state_path) if state_path is not None else None
        saved = self.state_file.load() if self.state_file is not None else None
        where = self.state_file.path if self.state_file else "?"
        self.settings, self.settings_diagnostics = wiring.read_settings(
            load_settings, saved.settings if saved else None, f"running with the last good settings ({where})"
        )
        self.metrics = Metrics()
        foreign.count_into(self.metrics.foreign_ignored)
        self.state = State(current=saved.snapshot()) if saved is not None else State()
        self.runner = wiring.runner(self.settings, exec_, self.metrics)
        self.records = Records(Path(self.settings.cacheDir))
        self.cluster = wiring.cluster(self.settings, self.metrics, self.records)
        self.addresses = Addresses(
            self.settings, self.cluster, self.records, lambda event, net: self.metrics.ipam.labels(event, net).inc()
        )
        self.tenants = TenantIds(self.settings, self.cluster, lambda: self.reload())
        self.pipeline = wiring.pipeline(self.settings, self.tenants)
        self.delegator = wiring.delegator(
            lambda: self.settings,
            self.runner,
            self.records,
            self.state.networks,
            self.cluster,
            self.addresses.allocator,
            link_netns,
        )
        self.notifier = Notifier()
        self._compiles = Compiles(faults.stall_from_env(environ))
        self.server: Server | None = None
        self.podsync: PodSync | None = None
        self.activated = False
        self.watcher: Watcher | None = None
        self.stop_event = threading.Event()
        self._reload_lock = threading.Lock()
        self.reloaded = threading.Condition()  # notified after every compile (tests and tools wait on it)
        self._last_status = 0.0
        # The TenantNetworks the last compile read (Plan.tenant_networks): None until one read every file.
        self._tenant_networks: dict[str, str] | None = None

    def _check_pools(self) -> None:
        assert self.delegator.devices is not None
        wiring.check_pools(self.settings, self.delegator.devices)

    def _release_tenant_ids(self) -> int:
        exists = self.cluster.tenant_network_exists if self.cluster is not None else None
        return self.tenants.release_gone(self._tenant_networks, exists)

    # ---------------------------------------------------------------------------------------------- compile

    def reload(self, *, reread_config: bool = False, changed: set[str] | None = None) -> Snapshot:
        """Compile again: everything, or (with `changed`, from the watcher) what those paths touch. A broken
        edit keeps the last good output of what it touched; a compile that fails otherwise (a bug, memory) keeps
        everything as it was and makes the daemon degraded until one succeeds."""
        began = self._compiles.begin()
        try:
            return self._reload(reread_config, changed)
        except Exception as e:
            log.exception("compiling failed; serving the last good networks")
            self._compiles.error = Diagnostic(f"the last compile failed: {type(e).__name__}: {e}"[:500])
            self.metrics.degraded.set(1)
            self.notifier.status(self.status_line())
            return self.state.current
        finally:
            self._compiles.end(began)

    @property
    def compiling(self) -> bool:
        return self._compiles.oldest() is not None

    def stuck(self) -> str | None:
        """Why the daemon is not ready though it serves (the last good networks): a compile (a reload, an edit)
        that has run longer than compileTimeout, which may never finish (a file that never answers)."""
        since = self._compiles.oldest()
        if since is None or (took := time.monotonic() - since) < self.settings.compileTimeout:
            return None
        return f"a compile has not finished in {took:.0f}s (compileTimeout {self.settings.compileTimeout:g}s)"

    def _reload(self, reread_config: bool, changed: set[str] | None) -> Snapshot:
        with self._reload_lock:
            if self.server is not None:
                self._compiles.stall("compile")
            if reread_config:
                new, self.settings_diagnostics = wiring.read_settings(
                    self.load_settings, self.settings, "keeping the running settings"
                )
                if new != self.settings:
                    self._adopt(new)
            tdir = self.settings.templateDir.rstrip("/") + "/"
            if changed and any(p.startswith(tdir) or p + "/" == tdir for p in changed):
                self.pipeline.reset_templates()
            plan = self.pipeline.compile(changed=changed, stage=True)
            self._compiles.error = None
            self._tenant_networks = plan.tenant_networks
            snap = self.state.update(plan)
            self.addresses.serve(snap.networks)  # the pools served: which blocks and claims the node follows
            keep = {f"{name}.conflist" for name in snap.kept}
            try:
                changes = self.pipeline.write(plan, keep=keep)
            except HostError as e:
                log.error("cannot write compiled networks: %s", e)
                changes = []
            log_changes(changes, self.settings.outputDir)
            write_kept(snap, self.settings.outputDir, self.pipeline.output)
            if self.state_file is not None:
                self.state_file.save(self.settings, snap)
            if plan.diagnostics:
                level = logging.ERROR if snap.degraded else logging.WARNING
                log.log(level, "%s", report.format_all(plan.diagnostics))
            if snap.kept:
                log.error("degraded: keeping the last good output of %s", ", ".join(sorted(snap.kept)))
            try:
                self.delegator.gc_host_links()  # of networks that are gone, once no container uses them
            except HostError as e:
                log.error("cannot remove unused host links: %s", e)
            self.metrics.networks.set(len(snap.networks))
            self.metrics.degraded.set(1 if self.degraded else 0)
            if self.cluster is not None:
                self.cluster.report_problems(plan.diagnostics)  # events on the objects whose copy is broken
            wiring.write_runtime_config(self.settings)
            kept = f", degraded ({len(snap.kept)} kept)" if snap.degraded else ""
            log.info("generation %d: %d networks%s", snap.generation, len(snap.networks), kept)
            self.notifier.status(self.status_line())
            libc.malloc_trim()  # what the compile freed goes back to the system, not only to the heap
            with self.reloaded:
                self.reloaded.notify_all()
            return snap

    @property
    def diagnostics(self) -> list[Diagnostic]:
        """What is wrong now: netcomp.yaml's errors (while the last good settings run), a compile that failed or
        does not finish, then the intents'."""
        stuck = self.stuck()
        now = [self._compiles.error] if self._compiles.error is not None else []
        now += [Diagnostic(stuck)] if stuck is not None else []
        return [*self.settings_diagnostics, *now, *self.state.current.diagnostics]

    @property
    def degraded(self) -> bool:
        return any(d.is_error for d in self.diagnostics)

    def status_line(self) -> str:
        """systemd's STATUS=: one line an operator reads in `systemctl status netcomp`."""
        snap = self.state.current
        server = self.server
        errors = [d for d in self.diagnostics if d.is_error]
        text = f"{len(snap.networks)} networks"
        if errors:
            first = errors[0]
            text += f", DEGRADED: {len(errors)} errors, first {first.location}: {first.message}"[:200]
        text += f", {self.records.count()} containers attached"
        if self.delegator.unfinished:
            text += f", {sum(self.delegator.unfinished.values())} attachments to undo (see `netcomp attachments`)"
        if self.cluster is not None:
            text += ", cluster synced" if self.cluster.synced else ", cluster NOT SYNCED"
        if server is not None:
            text += f", {server.served} requests served, {server.in_flight} in flight"
        return text

    def _adopt(self, new: Settings) -> None:
        """Take new settings on SIGHUP. The socket stays; what depends on paths is rebuilt."""
        if new.kubernetes != self.settings.kubernetes or new.clusterIntentDir != self.settings.clusterIntentDir:
            log.warning("the kubernetes settings changed: they take effect when netcomp restarts")
            new = new.model_copy(
                update={"kubernetes": self.settings.kubernetes, "clusterIntentDir": self.settings.clusterIntentDir}
            )
        old, self.settings = self.settings, new
        self.pipeline = wiring.pipeline(new, self.tenants)
        self.runner.plugin_dirs = [str(d) for d in new.pluginDirs]
        self.runner.timeout = new.pluginTimeout
        self.records.directory = Path(new.cacheDir)
        self.runner.marker = wiring.marker(new.cacheDir)
        if (new.kubelet, new.deviceInfoDir) != (old.kubelet, old.deviceInfoDir):
            assert self.delegator.devices is not None
            self.delegator.devices.kubelet.close()
            self.delegator.use_devices(wiring.devices(new, lambda: set(self.settings.sriovPools)))
        self._check_pools()
        if self.server is not None:
            # The new limits apply to what comes next; maxInFlight sizes what exists and needs a restart.
            self.server.loop.limits = replace(wiring.limits(new), max_in_flight=self.server.loop.limits.max_in_flight)

    # ---------------------------------------------------------------------------------------------- serving

    def _addresses_of(self, conflist: Mapping[str, Any]) -> str | None:
        """Who gives a network's addresses, for status: netcomp's allocator (and its store), else None."""
        pool = (conflist.get("netcomp") or {}).get("pool")
        return f"cluster ({self.addresses.store_kind} store)" if isinstance(pool, dict) else None

    def status(self) -> dict[str, Any]:
        snap = self.state.current
        server = self.server
        return {
            "version": __version__,
            "generation": snap.generation,
            "ready": bool(server and server.ready.is_set()) and self.stuck() is None,
            "degraded": self.degraded,
            "defaultNetwork": self.settings.defaultNetwork,
            "networks": [
                {
                    "name": n,
                    "type": (c.get("netcomp") or {}).get("type"),
                    "addresses": self._addresses_of(c),
                    "source": snap.sources.get(n),
                    "keptLastGood": n in snap.kept,
                }
                for n, c in sorted(snap.networks.items())
            ],
            "attachments": self.records.count(),
            "attachmentsToUndo": sum(self.delegator.unfinished.values()),
            # Pods whose edit of their networks waits for their record's undo (podsync.PodSync.undone).
            "podEditsWaiting": self.podsync.pods_waiting if self.podsync is not None else 0,
            "requests": {
                "inFlight": server.in_flight if server else 0,
                "queued": server.queued if server else 0,
                "served": server.served if server else 0,
            },
            "diagnostics": [d.as_dict() for d in self.diagnostics],
            "kubernetes": self.cluster.status() if self.cluster is not None else None,
        }

    def recover(self) -> list[Record]:
        """Before serving: the address claims listed (and followed), the delegates an earlier daemon of this cache
        dir left running killed, then what it left mid-ADD undone (Delegator.recover). The records as they are."""
        records = self.delegator.records.entries()  # the one read of every record at start-up
        self.addresses.start(self.stop_event, records)
        self.tenants.start(self.stop_event)
        killed = kill_marked(self.runner.marker)
        if killed:
            log.warning("killed %d delegate processes an earlier netcomp daemon left running", killed)
        self._check_pools()
        undone, failed, records = self.delegator.recover(records)
        self.metrics.recovered.labels("undone").inc(undone)
        self.metrics.recovered.labels("failed").inc(failed)
        return records

    def start(self) -> Server:
        records = self.recover()
        self._start_podsync(records)
        if self.delegator.policies is not None:  # the rules a restart left in the kernel made right, then kept so
            args = (self.stop_event,)
            threading.Thread(target=self.delegator.policies.run, args=args, name="policy-sync", daemon=True).start()
        sock, self.activated = listen(self.settings.socket)
        views: dict[str, Callable[[Mapping[str, str]], Any]] = {
            protocol.STATUS_PATH: lambda _: self.status(),
            protocol.ATTACHMENTS_PATH: lambda _: self.delegator.attachments(),
            protocol.IPAM_PATH: lambda params: self.addresses.show(self.state.networks(), params.get("network")),
        }
        hotplug = self.podsync is not None
        queries: dict[str, Callable[[bytes], Any]] = {
            protocol.EXPLAIN_PATH: lambda body: handlers.explain(self.delegator, body, hotplug=hotplug),
            protocol.IPAM_GC_PATH: lambda _: self._gc_cluster(),
        }
        limits = wiring.limits(self.settings)
        self.server = Server(sock, self.delegator, self.metrics, limits=limits, views=views, queries=queries)
        self.server.loop.on_tick = self._tick
        self.server.stuck = self.stuck
        if self.cluster is not None:
            self.cluster.pods.quiet = self.server.wait_quiet
            if self.addresses.worker is not None:  # the address blocks' writes behind
                self.addresses.worker.quiet = self.server.wait_quiet
        wd = self.notifier.watchdog_sec
        self.server.loop.tick_every = min(0.5, wd / 4) if wd else 0.5
        # Ready before serving: the first compile and the recovery are done, and a client that connected early
        # (socket activation) is waiting in the backlog for exactly this.
        self.server.ready.set()
        self.server.start()
        threading.Thread(target=self._maintain, name="maintain", daemon=True).start()
        log.info("serving on %s", "the socket systemd passed (LISTEN_FDS)" if self.activated else self.settings.socket)
        return self.server

    def _maintain(self) -> None:
        """What is done every so often, until stop: rollbacks that failed tried again, this node's orphaned address
        claims freed, and (kubernetes.ipamGC) other nodes' claims whose node or pod is gone."""

        def retry_undo() -> object:
            return self.delegator.retry_unfinished() if self.delegator.unfinished else None

        tasks: list[tuple[float, Callable[[], object]]] = [
            (UNDO_RETRY_EVERY, retry_undo),
            (self.settings.ipamGrace, self.addresses.gc_own),
            (self.settings.ipamGrace, self._release_tenant_ids),
        ]
        if self.settings.kubernetes is not None and self.settings.kubernetes.ipamGC:
            tasks.append((CLUSTER_GC_EVERY, self._gc_cluster))
        due = [time.monotonic() + period for period, _ in tasks]
        while not self.stop_event.wait(max(0.0, min(due) - time.monotonic())):
            for i, (period, task) in enumerate(tasks):
                if time.monotonic() >= due[i]:
                    due[i] = time.monotonic() + period
                    try:
                        task()
                    except Exception:
                        log.exception("%s failed", getattr(task, "__name__", "maintenance"))

    def _gc_cluster(self) -> dict[str, Any]:
        """What other nodes left that is provably stale: address claims, and EndpointSlices (POST /ipam/gc,
        `netcomp ipam gc`, and every few minutes with kubernetes.ipamGC)."""
        doc = self.addresses.gc_cluster()
        slices = self.cluster.slices if self.cluster is not None else None
        if slices is not None:
            doc["endpointSlices"] = slices.gc()
        return doc

    def _tick(self) -> None:
        self.notifier.tick()
        now = time.monotonic()
        if now - self._last_status >= STATUS_EVERY:
            self._last_status = now
            self.notifier.status(self.status_line())

    def _start_podsync(self, records: list[Record]) -> None:
        """Hot-plug by editing the pod (cluster/podsync.py): the pod watch queues a pod whose annotations
        changed; every recorded pod is compared once at start (a daemon killed mid-hot-plug finishes it)."""
        kube = self.settings.kubernetes
        if self.cluster is None or kube is None or not (kube.hotplug and kube.podNetworks):
            return
        self.podsync = PodSync(self.delegator)
        self.cluster.pods.on_change = self.podsync.changed
        self.delegator.when_undone(self.podsync.undone)  # an edit put off for an undo, synced once that is done
        self.podsync.all_recorded(records)
        listed = self.cluster.pods.synced
        threading.Thread(target=self.podsync.run, args=(self.stop_event, listed), name="pod-sync", daemon=True).start()

    def start_cluster(self) -> None:
        """Follow the cluster's Network objects and this node's pods (threads), waiting a bounded time for the
        first list of objects so that the first compile has them; a cluster that does not answer is retried in
        the background."""
        if self.cluster is None or self.settings.kubernetes is None:
            return
        timeout = self.settings.kubernetes.timeout
        self.cluster.start(self.stop_event)
        if self.cluster.followers and not self.cluster.wait_synced(timeout):
            known = len(self.cluster.files())
            log.warning("cluster: no list of objects within %gs; starting with the %d known", timeout, known)

    def watch(self, *, start: bool = True) -> None:
        """Recompile on every change in the intent, static and template dirs, watched from now on. start=False:
        start_watching() starts the thread that reads them, so that the first compile can run while the daemon
        has one thread (it may then fork: compiler/coldstart.py)."""
        dirs = [*self.settings.intent_layers(), *self.settings.staticDirs, self.settings.templateDir]
        self.watcher = Watcher(dirs, self._watched)
        if start:
            self.start_watching()

    def _watched(self, changed: set[str] | None) -> None:
        """The watcher's report: the paths that changed, or None when its events overflowed (anything may have
        changed, templates too: everything is read and rendered again)."""
        if changed is None:
            with self._reload_lock:
                self.pipeline.reset_templates()
        self.reload(changed=changed)

    def start_watching(self) -> None:
        assert self.watcher is not None
        threading.Thread(target=self.watcher.run, args=(self.stop_event,), name="watch", daemon=True).start()

    def stop(self, drain: float = DRAIN_SECONDS) -> bool:
        self.notifier.stopping()
        self.stop_event.set()
        done = True
        if self.server is not None:
            done = self.server.drain(drain)
            if not done:
                log.warning("stopping with %d requests still in flight", self.server.in_flight)
            self.server.shutdown()
            if not self.activated:  # an activated socket's file belongs to systemd's socket unit
                with contextlib.suppress(FileNotFoundError):
                    Path(self.settings.socket).unlink()
        self.delegator.close()
        if self.cluster is not None and self.settings.kubernetes is not None:
            self.cluster.pods.flush(self.settings.kubernetes.timeout)  # the last ADDs' statuses and events
            self.addresses.close(self.settings.kubernetes.timeout)  # which container has which address
        return done

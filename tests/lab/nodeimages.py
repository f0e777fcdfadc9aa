"""The two images a node without a registry runs: the pod sandbox's `pause` (the static binary
scripts/kube-test-bins.sh builds from the Kubernetes tree) and busybox (Debian's busybox-static), each packed as
a docker-archive tarball (manifest.json, the image config, one layer; the layout `docker save` writes and
`ctr images import` reads). Built in a few milliseconds from the binaries, with fixed times and owners, so the
same binaries give the same image ID."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

from tests.lab.kubeapi import BINS

PAUSE_IMAGE = "localhost/netcomp-test/pause:1"
BUSYBOX_IMAGE = "localhost/netcomp-test/busybox:1"
BUSYBOX = Path("/bin/busybox")
APPLETS = ("sh", "sleep", "ip", "cat", "ls", "true")


def _layer(files: dict[str, bytes], links: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        dirs = sorted({str(Path(p).parent) for p in [*files, *links]} - {"."})
        for d in dirs:
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for path, data in sorted(files.items()):
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
        for path, target in sorted(links.items()):
            info = tarfile.TarInfo(path)
            info.type, info.linkname, info.mode = tarfile.SYMTYPE, target, 0o777
            tar.addfile(info)
    return buf.getvalue()


def docker_archive(dest: Path, tag: str, layer: bytes, config: dict[str, object]) -> Path:
    """`dest`: a docker-archive tarball of one layer, tagged `tag`."""
    diff_id = hashlib.sha256(layer).hexdigest()
    image_config = {
        "architecture": "amd64",
        "os": "linux",
        "created": "2000-01-01T00:00:00Z",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
    }
    config_bytes = json.dumps(image_config, sort_keys=True).encode()
    config_name = f"{hashlib.sha256(config_bytes).hexdigest()}.json"
    manifest = [{"Config": config_name, "RepoTags": [tag], "Layers": [f"{diff_id}/layer.tar"]}]
    members = {config_name: config_bytes, f"{diff_id}/layer.tar": layer, "manifest.json": json.dumps(manifest).encode()}
    with tarfile.open(dest, "w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return dest


def build(dest_dir: Path) -> list[Path]:
    """The pause and busybox archives in dest_dir."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    pause = _layer({"pause": (BINS / "pause").read_bytes()}, {})
    busybox = _layer({"bin/busybox": BUSYBOX.read_bytes()}, {f"bin/{a}": "busybox" for a in APPLETS})
    return [
        docker_archive(dest_dir / "pause.tar", PAUSE_IMAGE, pause, {"Entrypoint": ["/pause"]}),
        docker_archive(dest_dir / "busybox.tar", BUSYBOX_IMAGE, busybox, {"Cmd": ["/bin/sh"], "Env": ["PATH=/bin"]}),
    ]

#!/usr/bin/env python3
"""Writes a one-layer OCI image archive that `ctr images import` reads, with no registry.

    hack/oci-archive.py OUT.tar REFERENCE CMD DIR

DIR's files become the layer (owned by root, mtimes 0, sorted: the same input gives the same
digest), CMD (one path) the image's command. The index names the image REFERENCE through the
`io.containerd.image.name` annotation, which containerd imports it under. The same layout as the
test harness's images (tests/src/image/oci.rs), for scripts that run before any cargo build
(hack/kube-node.sh's pause image).
"""
import hashlib
import io
import json
import os
import platform
import sys
import tarfile

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER = "application/vnd.oci.image.layer.v1.tar"
INDEX = "application/vnd.oci.image.index.v1+json"


def arch():
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())


def add(tar, name, data=None, mode=0o644, is_dir=False):
    info = tarfile.TarInfo(name)
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mode = mode
    if is_dir:
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
    else:
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


def layer_of(root):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            rel = os.path.relpath(dirpath, root)
            if rel != ".":
                add(tar, rel, mode=os.stat(dirpath).st_mode & 0o7777, is_dir=True)
            for f in sorted(filenames):
                p = os.path.join(dirpath, f)
                name = os.path.normpath(os.path.join(rel, f))
                with open(p, "rb") as fh:
                    add(tar, name, fh.read(), mode=os.stat(p).st_mode & 0o7777)
    return buf.getvalue()


def digest(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    out, reference, cmd, root = sys.argv[1:]
    layer = layer_of(root)
    config = json.dumps({
        "architecture": arch(),
        "os": "linux",
        "config": {"Cmd": [cmd], "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [digest(layer)]},
    }).encode()
    manifest = json.dumps({
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": {"mediaType": CONFIG, "digest": digest(config), "size": len(config)},
        "layers": [{"mediaType": LAYER, "digest": digest(layer), "size": len(layer)}],
    }).encode()
    tag = reference.rsplit(":", 1)[1] if ":" in reference.rsplit("/", 1)[-1] else "latest"
    index = json.dumps({
        "schemaVersion": 2,
        "mediaType": INDEX,
        "manifests": [{
            "mediaType": MANIFEST,
            "digest": digest(manifest),
            "size": len(manifest),
            "platform": {"architecture": arch(), "os": "linux"},
            "annotations": {
                "io.containerd.image.name": reference,
                "org.opencontainers.image.ref.name": tag,
            },
        }],
    }).encode()
    with tarfile.open(out + ".tmp", mode="w", format=tarfile.PAX_FORMAT) as tar:
        add(tar, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        add(tar, "index.json", index)
        add(tar, "blobs", mode=0o755, is_dir=True)
        add(tar, "blobs/sha256", mode=0o755, is_dir=True)
        for blob in (layer, config, manifest):
            add(tar, "blobs/sha256/" + digest(blob)[len("sha256:"):], blob)
    os.replace(out + ".tmp", out)


if __name__ == "__main__":
    main()

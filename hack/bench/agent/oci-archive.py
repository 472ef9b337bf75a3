#!/usr/bin/env python3
"""Wraps a root filesystem tarball into a single-layer OCI layout archive for `ctr images import`.

    oci-archive.py ROOTFS_TAR REFERENCE OUT_TAR

The same layout as the test harness's images (tests/src/image/oci.rs): an uncompressed layer
(its diff id is its digest), a config with PATH, bash as the command and the agent's home as its
working directory, and the reference in the index's `io.containerd.image.name` annotation.
Standard library only; the layer is streamed, not read into memory.
"""

import hashlib
import io
import json
import sys
import tarfile

LAYER = "application/vnd.oci.image.layer.v1.tar"
CONFIG = "application/vnd.oci.image.config.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
INDEX = "application/vnd.oci.image.index.v1+json"


def sha256_file(path: str) -> tuple[str, int]:
    h, n = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
            n += len(chunk)
    return "sha256:" + h.hexdigest(), n


def blob(data: bytes) -> tuple[str, bytes]:
    return "sha256:" + hashlib.sha256(data).hexdigest(), data


def add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, 0
    tar.addfile(info, io.BytesIO(data))


def main(rootfs: str, reference: str, out: str) -> None:
    layer_digest, layer_size = sha256_file(rootfs)
    config_digest, config = blob(json.dumps({
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    "HOME=/home/agent", "LANG=C.UTF-8"],
            "Cmd": ["/bin/bash"],
            "WorkingDir": "/home/agent",
        },
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
    }, sort_keys=True).encode())
    manifest_digest, manifest = blob(json.dumps({
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": {"mediaType": CONFIG, "digest": config_digest, "size": len(config)},
        "layers": [{"mediaType": LAYER, "digest": layer_digest, "size": layer_size}],
    }, sort_keys=True).encode())
    tag = reference.rsplit(":", 1)[1] if ":" in reference.rsplit("/", 1)[-1] else "latest"
    index = json.dumps({
        "schemaVersion": 2,
        "mediaType": INDEX,
        "manifests": [{
            "mediaType": MANIFEST, "digest": manifest_digest, "size": len(manifest),
            "platform": {"architecture": "amd64", "os": "linux"},
            "annotations": {"io.containerd.image.name": reference,
                            "org.opencontainers.image.ref.name": tag},
        }],
    }, sort_keys=True).encode()
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        add_bytes(tar, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        add_bytes(tar, "index.json", index)
        for digest, data in ((config_digest, config), (manifest_digest, manifest)):
            add_bytes(tar, "blobs/sha256/" + digest.split(":")[1], data)
        info = tar.gettarinfo(rootfs, arcname="blobs/sha256/" + layer_digest.split(":")[1])
        info.mode, info.mtime, info.uid, info.gid, info.uname, info.gname = 0o644, 0, 0, 0, "", ""
        with open(rootfs, "rb") as f:
            tar.addfile(info, f)
    print(manifest_digest)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])

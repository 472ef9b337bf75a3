"""A third-party check of a gvisor-hardened run attestation, with the standard libraries:
securesystemslib's DSSE Envelope and ed25519 key (over `cryptography`) for the signature, and
in-toto-attestation's Statement v1 for the statement. Nothing here shares code with the Rust
verifier: the key id is derived again from the raw public key, the subjects hashed again.

    python3 verify_in_toto.py PUBLIC_KEY_PEM ENVELOPE_JSON [ARTIFACTS_DIR]

Exit 0 and "verified" when everything holds; exit 1 with the reason otherwise.
Installed by hack/lib.sh (ensure_python_tools), pinned there.
"""

import hashlib
import json
import os
import sys

from cryptography.hazmat.primitives import serialization
from google.protobuf import json_format
from in_toto_attestation.v1 import statement_pb2
from in_toto_attestation.v1.statement import Statement
from securesystemslib.dsse import Envelope
from securesystemslib.signer import SSlibKey

PAYLOAD_TYPE = "application/vnd.in-toto+json"


def main(pub_path, envelope_path, artifacts=None):
    with open(pub_path, "rb") as f:
        public = serialization.load_pem_public_key(f.read())
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    keyid = hashlib.sha256(raw).hexdigest()[:16]
    key = SSlibKey.from_crypto(public, keyid=keyid)

    with open(envelope_path) as f:
        envelope = Envelope.from_dict(json.load(f))
    if envelope.payload_type != PAYLOAD_TYPE:
        raise ValueError(f"payloadType {envelope.payload_type!r}")
    envelope.verify([key], 1)

    proto = json_format.Parse(envelope.payload.decode("utf-8"), statement_pb2.Statement())
    statement = Statement.copy_from_pb(proto)
    statement.validate()

    if artifacts:
        for subject in statement.pb.subject:
            path = os.path.join(artifacts, subject.name.lstrip("/"))
            with open(path, "rb") as f:
                got = hashlib.sha256(f.read()).hexdigest()
            if got != subject.digest["sha256"]:
                raise ValueError(f"{subject.name}: sha256 {got} != {subject.digest['sha256']}")
    print(f"verified: {len(statement.pb.subject)} subject(s), {statement.pb.predicate_type}")


if __name__ == "__main__":
    try:
        main(*sys.argv[1:])
    except Exception as e:  # any refusal from the libraries is a refusal
        print(f"refused: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)

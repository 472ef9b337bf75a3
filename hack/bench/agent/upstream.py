#!/usr/bin/env python3
"""The agent bench's upstreams: a local Python package index and a git server over HTTPS.

    upstream.py wheels DIR              build the wheels the workload installs into DIR
    upstream.py site WHEELS OUT         write the index (OUT/simple, OUT/packages) and the git
                                        repository (OUT/git/project.git) the server serves
    upstream.py serve OUT CERT KEY ADDR:PORT
                                        serve both over HTTPS until killed

`wheels` is the only step that reaches a registry: `pip wheel` of two packages generated here
(gvhdemo-core and gvhdemo-app, which depends on it) and of pytest and requests with their
dependencies, pinned; hack/agent-bench.sh keeps the result under /var/cache/gvisor-hardened/.
`site` and `serve` are local. The server is run by the bench driver inside a network namespace
of its own (tests/examples/agent_bench): `/simple/<name>/` is a PEP 503 index, `/packages/*`
the wheels, and `/git/*` goes to `git http-backend` (smart HTTP), so `git clone` and `git fetch`
work as against a forge. Standard library only.
"""

import hashlib
import os
import shutil
import ssl
import subprocess
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

# What `pip install` pulls besides our own two packages (pure-Python wheels, pinned).
THIRD_PARTY = ["pytest==8.3.4", "requests==2.32.3"]

# The generated project: test modules x tests per module (half parametrized).
TEST_MODULES = 30
TESTS_PER_MODULE = 10


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def package_sources(root: Path) -> list[Path]:
    """Two small setuptools projects: gvhdemo-core and gvhdemo-app (depends on the core)."""
    core = root / "gvhdemo-core"
    write(core / "pyproject.toml", """[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "gvhdemo-core"
version = "1.0.0"
""")
    write(core / "gvhdemo_core/__init__.py", '''"""Helpers the bench's test project exercises."""
import hashlib
import re


def checksum(text):
    return hashlib.sha256(text.encode()).hexdigest()


def slugify(text):
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
''')
    app = root / "gvhdemo-app"
    write(app / "pyproject.toml", """[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "gvhdemo-app"
version = "1.0.0"
dependencies = ["gvhdemo-core==1.0.0"]
""")
    write(app / "gvhdemo_app/__init__.py", '''"""The application layer of the bench's test project."""
from gvhdemo_core import checksum, slugify


def record(title, body):
    return {"slug": slugify(title), "sum": checksum(body), "size": len(body)}


def fib(n):
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a
''')
    return [core, app]


def cmd_wheels(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    src = out / "src"
    dirs = package_sources(src)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    # Our two: built here with pip wheel (setuptools comes through pip's build isolation).
    subprocess.run(pip + ["wheel", "--no-deps", "-w", str(out)] + [str(d) for d in dirs],
                   check=True)
    # pytest, requests and what they depend on, as wheels for the image's Python (bookworm:
    # CPython 3.11), whatever the host's Python is.
    subprocess.run(pip + ["download", "--only-binary=:all:", "--python-version", "3.11",
                          "--implementation", "cp", "-d", str(out)] + THIRD_PARTY, check=True)
    shutil.rmtree(src)


def normalize(name: str) -> str:
    out, dash = [], False
    for ch in name.lower():
        if ch in "-_.":
            dash = True
            continue
        if dash and out:
            out.append("-")
        dash = False
        out.append(ch)
    return "".join(out)


def write_index(wheels: Path, out: Path) -> int:
    """PEP 503: /simple/ lists projects, /simple/<project>/ links each file with its sha256."""
    packages = out / "packages"
    packages.mkdir(parents=True, exist_ok=True)
    projects: dict[str, list[str]] = {}
    for whl in sorted(wheels.glob("*.whl")):
        shutil.copy(whl, packages / whl.name)
        digest = hashlib.sha256(whl.read_bytes()).hexdigest()
        name = normalize(whl.name.split("-")[0])
        projects.setdefault(name, []).append(
            f'<a href="/packages/{whl.name}#sha256={digest}">{whl.name}</a><br>')
    links = "".join(f'<a href="/simple/{p}/">{p}</a><br>' for p in sorted(projects))
    write(out / "simple/index.html", f"<!DOCTYPE html><html><body>{links}</body></html>\n")
    for p, files in projects.items():
        write(out / f"simple/{p}/index.html",
              f"<!DOCTYPE html><html><body>{''.join(files)}</body></html>\n")
    return len(projects)


def test_module(i: int) -> str:
    lines = ["import pytest", "", "from gvhdemo_app import fib, record", ""]
    half = TESTS_PER_MODULE // 2
    lines += [
        f"@pytest.mark.parametrize('n', range({half}))",
        f"def test_fib_recurrence_{i}(n):",
        f"    k = n + {i}",
        "    assert fib(k + 2) == fib(k + 1) + fib(k)",
        "",
    ]
    for j in range(TESTS_PER_MODULE - half):
        lines += [
            f"def test_record_{i}_{j}(tmp_path):",
            f"    body = 'module {i} case {j} ' * {j + 1}",
            "    (tmp_path / 'body.txt').write_text(body)",
            f"    r = record('Module {i} Case {j}', (tmp_path / 'body.txt').read_text())",
            f"    assert r['slug'] == 'module-{i}-case-{j}'",
            "    assert len(r['sum']) == 64 and r['size'] == len(body)",
            "",
        ]
    return "\n".join(lines)


def git(cwd: Path, *args: str) -> None:
    env = dict(os.environ, GIT_AUTHOR_NAME="bench", GIT_AUTHOR_EMAIL="bench@example.test",
               GIT_COMMITTER_NAME="bench", GIT_COMMITTER_EMAIL="bench@example.test",
               GIT_AUTHOR_DATE="2026-01-01T00:00:00Z", GIT_COMMITTER_DATE="2026-01-01T00:00:00Z")
    subprocess.run(["git", "-c", "init.defaultBranch=main", *args], cwd=cwd, env=env,
                   check=True, stdout=subprocess.DEVNULL)


def write_repo(out: Path) -> None:
    """A project with TEST_MODULES x TESTS_PER_MODULE tests and some source on `main`, and a
    `feature` branch with more commits for `git fetch` to bring."""
    work = out / "git-work"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    git(work, "init", "-q")
    write(work / "README.md", "The agent bench's test project.\n")
    write(work / "tests/conftest.py", "")
    for i in range(TEST_MODULES):
        write(work / f"tests/test_mod_{i:02d}.py", test_module(i))
    for i in range(200):
        body = "".join(f"def f_{i}_{k}(x):\n    return x * {k} + {i}\n\n" for k in range(40))
        write(work / f"src/pkg_{i // 20}/mod_{i}.py", body)
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "main: tests and sources")
    git(work, "checkout", "-q", "-b", "feature")
    for c in range(5):
        for i in range(20):
            body = "".join(f"FEATURE_{c}_{i}_{k} = {k * 7919 % 10007}\n" for k in range(200))
            write(work / f"feature/part_{c}/data_{i}.py", body)
        git(work, "add", "-A")
        git(work, "commit", "-q", "-m", f"feature: part {c}")
    git(work, "checkout", "-q", "main")
    bare = out / "git/project.git"
    if bare.exists():
        shutil.rmtree(bare)
    bare.parent.mkdir(parents=True, exist_ok=True)
    git(out, "clone", "-q", "--bare", str(work), str(bare))
    git(bare, "config", "http.receivepack", "false")
    shutil.rmtree(work)


def cmd_site(wheels: Path, out: Path) -> None:
    n = write_index(wheels, out)
    write_repo(out)
    print(f"site: {n} projects in the index, git/project.git with main and feature")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    root = Path(".")

    def log_message(self, *_args):  # quiet: one line per request would be noise
        pass

    def send(self, code: int, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(code)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def static(self) -> None:
        path = self.path.split("?", 1)[0]
        rel = path.lstrip("/")
        target = (self.root / rel).resolve()
        if not str(target).startswith(str(self.root.resolve())):
            return self.send(403, b"forbidden\n", {"Content-Type": "text/plain"})
        if target.is_dir():
            if not path.endswith("/"):
                return self.send(301, b"", {"Location": path + "/"})
            target = target / "index.html"
        if not target.is_file():
            return self.send(404, b"not found\n", {"Content-Type": "text/plain"})
        kind = "text/html" if target.suffix == ".html" else "application/octet-stream"
        self.send(200, target.read_bytes(), {"Content-Type": kind})

    def git_backend(self) -> None:
        path, _, query = self.path.partition("?")
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": str(self.root / "git"),
            "GIT_HTTP_EXPORT_ALL": "1",
            "REQUEST_METHOD": self.command,
            "PATH_INFO": path[len("/git"):],
            "QUERY_STRING": query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_ADDR": self.client_address[0],
            "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
        }
        if self.headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
        out = subprocess.run(["git", "http-backend"], input=body, env=env,
                             capture_output=True).stdout
        head, _, payload = out.partition(b"\r\n\r\n")
        if not _:
            head, _, payload = out.partition(b"\n\n")
        code, headers = 200, {}
        for line in head.decode("latin-1").splitlines():
            k, _, v = line.partition(":")
            if k.lower() == "status":
                code = int(v.strip().split()[0])
            elif k:
                headers[k.strip()] = v.strip()
        self.send(code, payload, headers)

    def do_GET(self):
        if self.path.startswith("/git/"):
            return self.git_backend()
        return self.static()

    do_HEAD = do_GET

    def do_POST(self):
        if self.path.startswith("/git/"):
            return self.git_backend()
        self.send(405, b"", {})


def cmd_serve(root: Path, cert: str, key: str, listen: str) -> None:
    host, _, port = listen.rpartition(":")
    Handler.root = root
    server = ThreadingHTTPServer((host, int(port)), Handler)
    server.daemon_threads = True
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    print(f"serving {root} on https://{listen}", flush=True)
    server.serve_forever()


def main(argv: list[str]) -> None:
    if len(argv) >= 2 and argv[0] == "wheels":
        return cmd_wheels(Path(argv[1]))
    if len(argv) >= 3 and argv[0] == "site":
        return cmd_site(Path(argv[1]), Path(argv[2]))
    if len(argv) >= 5 and argv[0] == "serve":
        return cmd_serve(Path(argv[1]), argv[2], argv[3], argv[4])
    sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])

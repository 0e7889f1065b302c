"""TLS in the service, tried as a user would (issue 50, "TLS on both transports"): docs/service.md's
"TLS" blocks run as written in a fresh directory (the openssl line makes a self-signed
certificate for localhost and 127.0.0.1; `reweighter serve --tls-cert-file ... --tls-key-file
...` in a child process; the client snippet in a fresh interpreter, free ports in place of 8080
and 50051), its answers over https and grpcs equal to a plain service's; a plain client, and a
TLS client that does not trust the certificate, get no answer; a missing or unreadable key file
stops serve naming the setting.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import no_retry

from reweighter.client import connect
from reweighter.errors import ConnectionFailed
from reweighter.launch import OFFLINE, serve

PAGE = Path(__file__).resolve().parents[2] / "docs" / "service.md"


def _block(marker: str) -> str:
    text = PAGE.read_text()
    at = text.index(f"<!-- {marker} -->")
    found = re.compile(r"```\w*\n(.*?)```", re.S).search(text, at)
    assert found is not None, marker
    return found.group(1)


def _env() -> dict[str, str]:
    """This environment without REDIS_URL and without SSL_CERT_FILE (the documented fallback
    must not make a test pass that ca_file should)."""
    drop = {"REDIS_URL", "SSL_CERT_FILE"}
    return {**{k: v for k, v in os.environ.items() if k not in drop}, **OFFLINE}


def _answers(stdout: str) -> dict[str, list[float]]:
    """The snippet's lines, `<url> [rewards]`, by scheme."""
    out = {}
    for line in stdout.splitlines():
        url, rewards = line.split(" ", 1)
        out[url.split("://", 1)[0]] = ast.literal_eval(rewards)
    return out


def _documented(tmp_path: Path) -> tuple[str, list[str]]:
    """Run the block's openssl line in `tmp_path`; the serve line's flags, paths made absolute."""
    make, serve_line = _block("tls-serve-example").strip().splitlines()
    done = subprocess.run(["bash", "-c", make], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    words = shlex.split(serve_line)
    assert words[:2] == ["reweighter", "serve"], serve_line
    flags = [str(tmp_path / w) if w.endswith(".pem") else w for w in words[2:]]
    return str(tmp_path / "server.pem"), flags


@pytest.mark.server  # `reweighter serve` as a child process
def test_documented_tls_answers_on_both_transports_as_plain_does(tmp_path: Path) -> None:
    ca_file, flags = _documented(tmp_path)
    assert {"--tls-cert-file", "--tls-key-file"} <= set(flags)
    snippet = _block("tls-client-example")
    request_line = next(line for line in snippet.splitlines() if "ReweightRequest(" in line)

    with serve(env=_env()) as plain:  # the same request, no TLS
        code = snippet.replace('ca_file="server.pem"', "")
        code = code.replace("https://127.0.0.1:8080", plain.url)
        code = code.replace("grpcs://127.0.0.1:50051", f"grpc://{plain.target}")
        assert code.count("127.0.0.1:") == 2 and request_line in code, code
        done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=_env(),
                              capture_output=True, text=True, timeout=180)  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        expected = _answers(done.stdout)
    assert set(expected) == {"http", "grpc"} and expected["http"] == expected["grpc"]
    assert len(expected["http"]) == 3

    with serve(*flags, env=_env(), ca_file=ca_file) as served:
        assert served.url.startswith("https://")
        assert "over TLS" in served.log()
        code = snippet.replace(":8080", f":{served.http_port}")
        code = code.replace(":50051", f":{served.grpc_port}")
        done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=_env(),
                              capture_output=True, text=True, timeout=180)  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        got = _answers(done.stdout)
        assert got == {"https": expected["http"], "grpcs": expected["grpc"]}
        # without ca_file, both transports trust the file SSL_CERT_FILE names
        code = code.replace('ca_file="server.pem"', "")
        done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path,
                              env={**_env(), "SSL_CERT_FILE": ca_file},
                              capture_output=True, text=True, timeout=180)  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        assert _answers(done.stdout) == got

        # no answer without TLS, nor over TLS to a client that does not trust the certificate
        request = _request(snippet)
        plain_urls = [served.url.replace("https://", "http://"), f"grpc://{served.target}"]
        untrusting = [served.url, f"grpcs://{served.target}"]
        for url in plain_urls + untrusting:
            client = connect(url, retry=no_retry(), timeout_s=10)
            with client, pytest.raises(ConnectionFailed) as refused:
                client.reweight(request)
            if url in untrusting:  # the client's own check: a certificate it does not trust
                assert "CERTIFICATE_VERIFY_FAILED" in str(refused.value), (url, refused.value)
        # and the service is still there for a client that trusts it
        with connect(served.url, ca_file=ca_file, retry=no_retry()) as client:
            assert [g.rewards for g in client.reweight(request).groups] == [expected["http"]]
        assert served.proc.poll() is None


def _request(snippet: str) -> object:
    """The snippet's `request`, built here."""
    scope: dict[str, object] = {}
    exec(snippet.split("for url in", 1)[0], scope)  # its imports and its request line
    return scope["request"]


@pytest.mark.server  # `reweighter serve` as a child process (it stops before the model)
@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--tls-cert-file", "{dir}/server.pem"], "tls_key_file"),
        (["--tls-key-file", "{dir}/server-key.pem"], "tls_cert_file"),
        (["--tls-cert-file", "{dir}/server.pem", "--tls-key-file", "{dir}/absent.pem"],
         "tls_key_file"),
        (["--tls-cert-file", "{dir}/server-key.pem", "--tls-key-file", "{dir}/server.pem"],
         "tls_cert_file"),
    ],
    ids=["key-missing", "cert-missing", "key-unreadable", "not-a-pair"],
)  # fmt: skip
def test_serve_refuses_an_incomplete_or_unreadable_pair_naming_the_setting(
    tmp_path: Path, flags: list[str], named: str
) -> None:
    _documented(tmp_path)
    cmd = [sys.executable, "-m", "reweighter", "serve", "--http-port", "0", "--grpc-port", "0"]
    cmd += [f.format(dir=tmp_path) for f in flags]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=_env())
    assert done.returncode == 2, done.stderr[-2000:]
    assert "cannot start" in done.stderr and named in done.stderr, done.stderr[-2000:]
    assert "serving HTTP" not in done.stderr


def test_connect_refuses_a_ca_file_it_cannot_apply_or_read(tmp_path: Path) -> None:
    for url in ("http://127.0.0.1:8080", "grpc://127.0.0.1:50051", "inprocess://"):
        with pytest.raises(ValueError, match="ca_file"):
            connect(url, ca_file="server.pem")
    for url in ("https://127.0.0.1:8080", "grpcs://127.0.0.1:50051"):
        with pytest.raises(ValueError, match=r"ca_file '.*absent.pem': cannot read it"):
            connect(url, ca_file=str(tmp_path / "absent.pem"))
    (tmp_path / "empty.pem").write_text("not a certificate\n")
    with pytest.raises(ValueError, match="ca_file .*no PEM certificates"):
        connect("https://127.0.0.1:8080", ca_file=str(tmp_path / "empty.pem"))


def test_ray_serve_refuses_tls_settings_it_would_not_apply() -> None:
    """Serve's proxy owns the connections there: the files would be dropped, so they are refused."""
    from reweighter.config import Settings
    from reweighter.deploy.checks import DeployRefused, check

    for name in ("tls_cert_file", "tls_key_file"):
        with pytest.raises(DeployRefused, match=rf"^{name}: TLS is served by `reweighter serve`"):
            check(Settings(**{name: "server.pem"}), {"num_replicas": 1}, None)

"""Official SWE-bench data paths (issue 16, item 2): datasets from files or Hugging Face,
official images pulled through the Docker SDK (against registries on 127.0.0.1), and
swebench's ``make_test_spec`` as far as it runs offline.
"""

from __future__ import annotations

import http.server
import io
import json
import shutil
import socket
import subprocess
import tarfile
import threading
import time

import pytest
from conftest import require_sandbox

from comprl_gym.core import ConfigurationError
from comprl_gym.envs.swebench.env import SandboxFactory, SWEBenchConfig
from comprl_gym.envs.swebench.grading import grade_log, known_to_swebench, sb
from comprl_gym.envs.swebench.images import PullError, pull_image, registry_image_name
from comprl_gym.envs.swebench.instances import load_instances


# ---- datasets ---------------------------------------------------------------------------------
def test_parquet_file_of_instances_loads_like_json(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    suite = load_instances()
    rows = [dict(inst, FAIL_TO_PASS=json.dumps(inst["FAIL_TO_PASS"])) for inst in suite[:3]]
    for row in rows:
        row.pop("PASS_TO_PASS")
        row["PASS_TO_PASS"] = "[]"
    path = tmp_path / "test-00000-of-00001.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    loaded = load_instances(str(path))
    assert [i["instance_id"] for i in loaded] == [i["instance_id"] for i in suite[:3]]
    assert loaded[0]["FAIL_TO_PASS"] == suite[0]["FAIL_TO_PASS"]  # JSON strings become lists
    (tmp_path / "bad.parquet").write_bytes(b"not parquet")
    with pytest.raises(Exception, match="parquet"):
        load_instances(str(tmp_path / "bad.parquet"))


def test_hf_dataset_offline_says_so(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConfigurationError, match="offline.*SWE-bench_Verified|Verified.*offline"):
        load_instances("princeton-nlp/SWE-bench_Verified")


# ---- swebench's test specs offline --------------------------------------------------------------
def _official_instance(repo: str, version: str) -> dict:
    test_patch = (
        "diff --git a/tests/test_x.py b/tests/test_x.py\n--- a/tests/test_x.py\n"
        "+++ b/tests/test_x.py\n@@ -1 +1 @@\n-a = 1\n+a = 2\n"
    )
    return {
        "instance_id": f"{repo.replace('/', '__')}-1", "repo": repo, "version": version,
        "base_commit": "a" * 40, "environment_setup_commit": "b" * 40, "patch": "",
        "test_patch": test_patch, "problem_statement": "p", "hints_text": "",
        "FAIL_TO_PASS": ["tests/test_x.py::test_a"], "PASS_TO_PASS": ["tests/test_x.py::test_b"],
        "created_at": "2020-01-01",
    }  # fmt: skip


def test_make_test_spec_offline_builds_eval_scripts_and_stops_at_remote_requirements():
    # psf/requests: its specs name pip packages, so the whole spec is built offline.
    inst = _official_instance("psf/requests", "2.0")
    assert known_to_swebench(inst)
    spec = sb().make_test_spec(inst)
    assert spec.instance_image_key == "sweb.eval.x86_64.psf__requests-1:latest"
    assert "tests/test_x.py" in spec.eval_script and inst["base_commit"] in spec.eval_script
    assert sb().START_TEST_OUTPUT in spec.eval_script
    # Grading an official instance from a log is swebench's own, offline.
    log = (
        f"{sb().START_TEST_OUTPUT}\nPASSED tests/test_x.py::test_a\n"
        f"PASSED tests/test_x.py::test_b\n{sb().END_TEST_OUTPUT}\n"
    )
    assert grade_log(inst, log, "diff --git a/x b/x\n").resolved
    assert not grade_log(inst, log.replace("PASSED tests/test_x.py::test_a", "FAILED "
                                           "tests/test_x.py::test_a"), "x").resolved  # fmt: skip
    # django/django: its environment needs requirements.txt from raw.githubusercontent.com;
    # offline, make_test_spec stops there.
    import requests

    with pytest.raises(requests.exceptions.ConnectionError, match="raw.githubusercontent.com"):
        sb().make_test_spec(_official_instance("django/django", "3.0"))


# ---- pulling official images ------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def docker_client():
    require_sandbox("docker")
    import docker

    client = docker.from_env()
    yield client
    client.close()


class _RateLimited(http.server.BaseHTTPRequestHandler):
    """A registry that answers every request with Docker Hub's rate-limit error."""

    hits = 0

    def do_GET(self):  # noqa: N802 - http.server's naming
        type(self).hits += 1
        body = json.dumps(
            {
                "errors": [
                    {
                        "code": "TOOMANYREQUESTS",
                        "message": "You have reached your pull rate limit (toomanyrequests)",
                    }
                ]
            }  # fmt: skip
        ).encode()
        self.send_response(429)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_HEAD = do_GET

    def log_message(self, *args):
        pass


@pytest.mark.docker
def test_a_rate_limited_registry_is_retried_with_backoff_then_named(docker_client):
    port = _free_port()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), _RateLimited)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        name = registry_image_name("demo__demo-1", f"127.0.0.1:{port}/swebench")
        started = time.monotonic()
        with pytest.raises(PullError, match="rate limit") as caught:
            pull_image(docker_client, name, retries=2, backoff_s=0.2, progress=False)
        assert caught.value.reason == "rate_limited"
        assert _RateLimited.hits >= 3  # the first try and two retries reached the registry
        assert time.monotonic() - started >= 0.2 + 0.4  # backoff 0.2 s, then 0.4 s
    finally:
        server.shutdown()


@pytest.fixture
def local_registry(tmp_path):
    """Debian's docker-registry (distribution 2.8) serving on 127.0.0.1."""
    binary = shutil.which("docker-registry")
    if binary is None:
        pytest.skip("Debian's docker-registry is not installed (apt-get install docker-registry)")
    port = _free_port()
    config = tmp_path / "config.yml"
    config.write_text(
        "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n"
        f"    rootdirectory: {tmp_path / 'store'}\nhttp:\n  addr: 127.0.0.1:{port}\n"
    )
    proc = subprocess.Popen([binary, "serve", str(config)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        for _ in range(100):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


def _tiny_image(client, name: str) -> None:
    """A one-file image (FROM scratch) tagged ``name``."""
    dockerfile = b"FROM scratch\nCOPY hello /hello\n"
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        for path, data in (("Dockerfile", dockerfile), ("hello", b"official-style image\n")):
            info = tarfile.TarInfo(path)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    context.seek(0)
    client.images.build(fileobj=context, custom_context=True, tag=name, rm=True)


@pytest.mark.docker
def test_official_images_are_pulled_from_a_local_registry(docker_client, local_registry):
    namespace = f"{local_registry}/swebench"
    instance = _official_instance("demo/demo", "")
    name = registry_image_name(instance["instance_id"], namespace)
    _tiny_image(docker_client, name)
    repository, _, tag = name.rpartition(":")
    for event in docker_client.images.push(repository, tag=tag, stream=True, decode=True):
        assert "error" not in event, event
    docker_client.images.remove(name)
    config = SWEBenchConfig(image_namespace=namespace, pull="never")
    factory = SandboxFactory("docker", config)
    try:
        # never: no local image and nothing to build from is a clear error, nothing pulled.
        with pytest.raises(ConfigurationError, match="no image"):
            factory.image(instance)
        # missing: pulled through the SDK, then found locally.
        config.pull = "missing"
        assert factory.image(instance) == name
        assert docker_client.images.get(name).attrs["RepoTags"] == [name]
        # always: pulled again even when present (an up-to-date image).
        config.pull = "always"
        assert factory.image(instance) == name
        # A name the registry does not have fails at once (no retries), naming the cause.
        started = time.monotonic()
        missing = dict(instance, instance_id="demo__demo-404")
        with pytest.raises(PullError, match="not_found"):
            factory.image(missing)
        assert time.monotonic() - started < 30
    finally:
        docker_client.images.remove(name, force=True)

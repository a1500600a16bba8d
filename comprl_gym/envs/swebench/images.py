"""Sandbox images built on this machine, with no registry: the base root file system, its
Docker image, per-instance images named like SWE-bench's, and pruning to a disk budget.

The base is a Debian ``debootstrap --variant=minbase`` tree with python3, pytest, git and
patch (containers have no network, so everything the tests need is in the base). The same
directory is the root of the bubblewrap sandbox; ``docker import`` turns it into the base
image. Building it takes about three minutes once; afterwards it is found by its tag.

Example:
    >>> from comprl_gym.envs.swebench.images import base_image_tag, instance_image_name
    >>> base_image_tag().startswith("comprl-gym/swebench-base:")
    True
    >>> instance_image_name("textkit__textkit-1")
    'sweb.eval.x86_64.textkit__textkit-1:latest'
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from comprl_gym.core import EnvBackendError
from comprl_gym.utils import atomic_write_json, cache_dir, file_lock

logger = logging.getLogger(__name__)

DEBIAN_SUITE = "bookworm"
#: Debian packages of the base. python3-pytest because containers have no network.
BASE_PACKAGES = ("python3", "python3-pytest", "git", "patch", "procps")
#: The unprivileged user every command runs as (uid/gid 1000, home /home/swe).
SANDBOX_USER = "swe"
SANDBOX_UID = 1000
#: Where a repository's pinned PyPI dependencies appear inside a sandbox (read-only).
DEPS_MOUNT = "/opt/comprl-deps"
#: Labels that mark what comprl-gym created, so that clean-up never touches anything else.
LABEL = "comprl-gym.swebench"
LABEL_OWNER_PID = "comprl-gym.owner-pid"
LABEL_OWNER_HOST = "comprl-gym.owner-host"
_BASE_RECIPE_VERSION = "1"


def _recipe_hash() -> str:
    recipe = json.dumps([_BASE_RECIPE_VERSION, DEBIAN_SUITE, BASE_PACKAGES, SANDBOX_UID])
    return hashlib.sha256(recipe.encode()).hexdigest()[:10]


def base_image_tag() -> str:
    """The Docker tag of the base image for the current recipe."""
    return f"comprl-gym/swebench-base:{DEBIAN_SUITE}-{_recipe_hash()}"


def rootfs_dir() -> Path:
    """Where the base root file system lives (it may not be built yet)."""
    return cache_dir("swebench", "rootfs") / f"{DEBIAN_SUITE}-{_recipe_hash()}"


def instance_image_name(instance_id: str) -> str:
    """SWE-bench's local image name for an instance (swebench 4.x ``instance_image_key``)."""
    return f"sweb.eval.x86_64.{instance_id.lower()}:latest"


def official_image_names(instance_id: str, namespace: str = "swebench") -> list[str]:
    """Names under which an official image may exist locally, best first: swebench's local
    build name, then the registry name (``<namespace>/sweb.eval.x86_64.<id>`` with ``__``
    spelled ``_1776_``, as on Docker Hub)."""
    local = instance_image_name(instance_id)
    return [local, registry_image_name(instance_id, namespace)]


def registry_image_name(instance_id: str, namespace: str = "swebench") -> str:
    """The official image's name in a registry (Docker Hub's ``swebench/...`` by default).

    Example:
        >>> registry_image_name("django__django-11099")
        'swebench/sweb.eval.x86_64.django_1776_django-11099:latest'
    """
    local = instance_image_name(instance_id).replace("__", "_1776_")
    return f"{namespace.rstrip('/')}/{local}"


class PullError(EnvBackendError):
    """An image could not be pulled; ``reason`` is ``not_found``, ``rate_limited``,
    ``no_space``, ``unauthorized`` or ``network``."""

    def __init__(self, name: str, reason: str, detail: str):
        hints = {
            "not_found": "no such image in the registry: check the instance id and namespace",
            "rate_limited": "the registry's pull rate limit was hit: log in (docker login) or "
            "wait, or mirror the images to a registry of your own (image_namespace=...)",
            "no_space": "no space left for the image: free disk space or lower "
            "image_disk_budget_gb so that old images are pruned",
            "unauthorized": "the registry refused access: docker login, or check the name",
            "network": "the registry could not be reached",
        }
        super().__init__(f"pulling {name} failed ({reason}): {hints[reason]}. {detail}")
        self.name = name
        self.reason = reason


def _pull_failure_reason(text: str) -> str:
    """Classify a registry/engine error message.

    Example:
        >>> _pull_failure_reason("toomanyrequests: You have reached your pull rate limit")
        'rate_limited'
        >>> _pull_failure_reason("manifest for x:latest not found: manifest unknown")
        'not_found'
    """
    low = text.lower()
    if "toomanyrequests" in low or "rate limit" in low or "429" in low:
        return "rate_limited"
    if "no space left" in low:
        return "no_space"
    if "not found" in low or "manifest unknown" in low or "does not exist" in low:
        return "not_found"
    if "unauthorized" in low or "denied" in low or "authentication required" in low:
        return "unauthorized"
    return "network"


def pull_image(
    client: Any,
    name: str,
    retries: int = 4,
    backoff_s: float = 2.0,
    progress: bool = True,
) -> str:
    """Pull ``name`` through the Docker SDK, with a progress bar (bytes of all layers) and
    retries with exponential backoff on rate limits and network errors. A missing image or
    refused access fails at once; every failure is a :class:`PullError` naming its cause."""
    import docker

    repository, _, tag = name.rpartition(":")
    if not repository or "/" in tag:
        repository, tag = name, "latest"
    for attempt in range(retries + 1):
        try:
            _pull_with_progress(client, repository, tag, progress)
            client.images.get(f"{repository}:{tag}")
            return f"{repository}:{tag}"
        except (docker.errors.APIError, docker.errors.ImageNotFound, OSError) as exc:
            detail = str(getattr(exc, "explanation", None) or exc)
            reason = _pull_failure_reason(detail)
        except _StreamError as exc:
            detail = str(exc)
            reason = _pull_failure_reason(detail)
        if reason not in ("rate_limited", "network") or attempt == retries:
            raise PullError(name, reason, detail)
        wait = backoff_s * (2**attempt)
        logger.warning("pulling %s: %s; retry %d/%d in %.0f s", name, reason, attempt + 1,
                       retries, wait)  # fmt: skip
        time.sleep(wait)
    raise AssertionError("unreachable")


class _StreamError(Exception):
    """An error reported inside the engine's pull stream (the HTTP call itself succeeded)."""


def _pull_with_progress(client: Any, repository: str, tag: str, progress: bool) -> None:
    from tqdm import tqdm

    layers: dict[str, tuple[int, int]] = {}
    bar = tqdm(
        desc=f"pull {repository.rsplit('/', 1)[-1]}:{tag}", unit="B", unit_scale=True,
        disable=not progress, leave=False,
    )  # fmt: skip
    try:
        for event in client.api.pull(repository, tag=tag, stream=True, decode=True):
            if "error" in event:
                raise _StreamError(event.get("error", ""))
            detail = event.get("progressDetail") or {}
            if event.get("id") and detail.get("total"):
                layers[event["id"]] = (int(detail.get("current", 0)), int(detail["total"]))
                bar.total = sum(total for _, total in layers.values())
                bar.n = sum(current for current, _ in layers.values())
                bar.refresh()
    finally:
        bar.close()


def _add_sandbox_user(root: Path) -> None:
    """Add the unprivileged user to the tree by editing passwd/group (no chroot needed)."""
    uid = SANDBOX_UID
    with open(root / "etc/passwd", "a") as handle:
        handle.write(f"{SANDBOX_USER}:x:{uid}:{uid}:sandbox:/home/{SANDBOX_USER}:/bin/bash\n")
    with open(root / "etc/group", "a") as handle:
        handle.write(f"{SANDBOX_USER}:x:{uid}:\n")
    home = root / "home" / SANDBOX_USER
    home.mkdir(parents=True, exist_ok=True)
    os.chown(home, uid, uid)
    (root / "testbed").mkdir(exist_ok=True)
    os.chown(root / "testbed", uid, uid)
    # git refuses repositories owned by someone else unless told they are safe.
    (root / "etc/gitconfig").write_text(
        "[safe]\n\tdirectory = *\n[user]\n\tname = sandbox\n\temail = sandbox@localhost\n"
    )


def build_rootfs(force: bool = False) -> Path:
    """Build the base root file system once (idempotent, safe across processes).

    Runs ``debootstrap --variant=minbase`` into a temporary folder and renames it into place,
    so that an interrupted build never leaves a half tree that looks finished. Needs root,
    ``debootstrap`` and the Debian mirror (about 3 minutes, ~400 MB).
    """
    target = rootfs_dir()
    done_marker = target / ".comprl-gym-complete"
    if done_marker.exists() and not force:
        _open_root(target)
        return target
    with file_lock(target.parent / f".{target.name}.lock"):
        if done_marker.exists() and not force:
            _open_root(target)
            return target
        if shutil.which("debootstrap") is None:
            raise EnvBackendError(
                "building the SWE-bench sandbox root needs debootstrap: "
                "apt-get install -y debootstrap (or run scripts/services.sh start)"
            )
        if os.geteuid() != 0:
            raise EnvBackendError(
                f"building the sandbox root at {target} needs root (debootstrap); "
                "build it once as root or point COMPRL_GYM_CACHE at a cache that has it"
            )
        partial = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=target.parent))
        command = [
            "debootstrap",
            "--variant=minbase",
            f"--include={','.join(BASE_PACKAGES)}",
            DEBIAN_SUITE,
            str(partial),
        ]
        logger.info("building the sandbox root file system (~3 min): %s", " ".join(command))
        started = time.monotonic()
        try:
            _run_logged(command)
            _add_sandbox_user(partial)
            _open_root(partial)
            for junk in ("var/cache/apt/archives", "usr/share/doc", "usr/share/man"):
                shutil.rmtree(partial / junk, ignore_errors=True)
            (partial / ".comprl-gym-complete").write_text(base_image_tag() + "\n")
            if target.exists():
                shutil.rmtree(target)
            os.rename(partial, target)
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
        logger.info("sandbox root ready at %s in %.0f s", target, time.monotonic() - started)
    return target


def _open_root(root: Path) -> None:
    """Make the tree's top folder 0755 like any ``/`` (``mkdtemp`` made it 0700).

    Needed once the sandbox user is not the owner of the tree (bubblewrap run as root).
    Trees built before this fix are opened when first used.
    """
    if root.stat().st_mode & 0o777 != 0o755 and os.geteuid() == root.stat().st_uid:
        os.chmod(root, 0o755)
    # bubblewrap mounts a repository's dependencies here; it cannot create folders in a
    # read-only root, so the mount point is made in advance (trees built before, too).
    mount_point = root / DEPS_MOUNT.lstrip("/")
    if not mount_point.is_dir() and os.geteuid() == root.stat().st_uid:
        mount_point.mkdir(parents=True, exist_ok=True)


def _run_logged(command: list[str]) -> None:
    """Run a long build command, logging its progress lines; raise with its tail on failure."""
    tail: list[str] = []
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip()
            tail = (tail + [line])[-30:]
            if line.startswith(("I: Retrieving", "I: Installing", "I: Configuring", "I: Base")):
                logger.info("%s", line)
            else:
                logger.debug("%s", line)
    if proc.returncode != 0:
        raise EnvBackendError(
            f"{command[0]} failed with exit code {proc.returncode}:\n" + "\n".join(tail)
        )


def _image_exists(client: Any, name: str) -> bool:
    import docker

    try:
        client.images.get(name)
        return True
    except docker.errors.ImageNotFound:
        return False


def foreign_image_exists(client: Any, name: str) -> bool:
    """True when ``name`` exists and was not built by comprl-gym (an official image). Our own
    images are found by their content key in :func:`build_instance_image` instead, so that one
    built from an older checkout is never reused under its name."""
    import docker

    try:
        image = client.images.get(name)
    except docker.errors.ImageNotFound:
        return False
    return (image.labels or {}).get(LABEL) != "instance"


def ensure_base_image(client: Any) -> str:
    """The base Docker image's tag, importing the root file system first if needed."""
    tag = base_image_tag()
    if _image_exists(client, tag):
        return tag
    root = build_rootfs()
    with file_lock(cache_dir("swebench") / ".base-image.lock"):
        if _image_exists(client, tag):
            return tag
        logger.info("importing %s into Docker as %s", root, tag)
        repository, _, version = tag.partition(":")
        with subprocess.Popen(
            ["tar", "-C", str(root), "--exclude=./.comprl-gym-complete", "-c", "."],
            stdout=subprocess.PIPE,
        ) as tar:
            client.api.import_image(
                src=tar.stdout,
                repository=repository,
                tag=version,
                changes=[
                    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    "ENV LANG=C.UTF-8",
                    f"LABEL {LABEL}=base",
                    'CMD ["sleep", "infinity"]',
                ],
            )
        if tar.returncode != 0 or not _image_exists(client, tag):
            raise EnvBackendError(f"importing the sandbox root into Docker as {tag} failed")
    return tag


# ---- per-repository Python dependencies ----------------------------------------------------


def _requirements_key(requirements: tuple[str, ...] | list[str]) -> str:
    recipe = json.dumps([DEBIAN_SUITE, sorted(requirements)])
    return hashlib.sha256(recipe.encode()).hexdigest()[:12]


def build_requirements(requirements: tuple[str, ...] | list[str]) -> Path:
    """A folder with ``requirements`` (pinned, from PyPI) installed for the sandbox's Python.

    Built once per requirement set with ``pip install --target`` into the cache (atomically:
    an interrupted build leaves nothing that looks finished); sandboxes mount it read-only at
    :data:`DEPS_MOUNT`. Only wheels are taken (no build runs on the host), for the base's
    Python (bookworm: 3.11). Needs PyPI once; afterwards it is found in the cache.
    """
    target = cache_dir("swebench", "deps") / _requirements_key(requirements)
    done = target / ".comprl-gym-complete"
    if done.exists():
        return target
    with file_lock(target.parent / f".{target.name}.lock"):
        if done.exists():
            return target
        partial = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=target.parent))
        command = [
            sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
            "--no-compile", "--only-binary=:all:", "--python-version", "3.11",
            "--implementation", "cp", "--target", str(partial), *requirements,
        ]  # fmt: skip
        logger.info("installing sandbox dependencies: %s", " ".join(requirements))
        try:
            run = subprocess.run(command, capture_output=True, text=True, timeout=900)
            if run.returncode != 0:
                raise EnvBackendError(
                    f"installing {' '.join(requirements)} for the sandbox failed (PyPI is needed "
                    f"once, at build time):\n{run.stderr[-3000:]}"
                )
            shutil.rmtree(partial / "bin", ignore_errors=True)
            (partial / ".comprl-gym-complete").write_text("\n".join(requirements) + "\n")
            os.chmod(partial, 0o755)
            shutil.rmtree(target, ignore_errors=True)
            os.rename(partial, target)
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
    return target


def ensure_env_image(client: Any, requirements: tuple[str, ...] | list[str]) -> str:
    """The base image plus ``requirements`` at :data:`DEPS_MOUNT` (one image per set)."""
    base = ensure_base_image(client)
    if not requirements:
        return base
    tag = f"comprl-gym/swebench-env:{_recipe_hash()}-{_requirements_key(requirements)}"
    if _image_exists(client, tag):
        return tag
    deps = build_requirements(requirements)
    dockerfile = f"FROM {base}\nCOPY deps {DEPS_MOUNT}\n"
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(dockerfile.encode())
        tar.addfile(info, io.BytesIO(dockerfile.encode()))
        tar.add(deps, arcname="deps", filter=_root_owned)
    context.seek(0)
    logger.info("building image %s", tag)
    try:
        client.images.build(
            fileobj=context, custom_context=True, tag=tag, labels={LABEL: "env"}, rm=True,
            forcerm=True, network_mode="none",
        )  # fmt: skip
    except Exception as exc:  # docker.errors.BuildError, APIError
        raise EnvBackendError(f"building the image {tag} failed: {exc}") from exc
    return tag


def _root_owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def build_instance_image(
    client: Any,
    instance_id: str,
    testbed: Path,
    testbed_key: str | None = None,
    requirements: tuple[str, ...] | list[str] = (),
    pythonpath: str = "/testbed",
) -> str:
    """Build ``sweb.eval.x86_64.<id>`` from the base and a checked-out repository folder.

    ``testbed_key`` (e.g. ``repo@commit``) names the folder's content: instances that share
    it get the same image under their own names (a tag, no second build). ``requirements``
    come from :func:`ensure_env_image`; ``pythonpath`` is the image's ``PYTHONPATH``.
    """
    name = instance_image_name(instance_id)
    base = ensure_env_image(client, requirements)
    labels = {LABEL: "instance", f"{LABEL}.instance-id": instance_id}
    if testbed_key is not None:
        key = hashlib.sha256(f"{base}|{testbed_key}|{pythonpath}".encode()).hexdigest()[:16]
        labels[f"{LABEL}.testbed"] = key
        same = client.images.list(filters={"label": f"{LABEL}.testbed={key}"})
        if same:
            repository, _, tag = name.rpartition(":")
            same[0].tag(repository, tag)
            logger.info("tagged the image of %s as %s", testbed_key, name)
            return name
    dockerfile = (
        f"FROM {base}\n"
        f"COPY --chown={SANDBOX_UID}:{SANDBOX_UID} testbed /testbed\n"
        # A pristine copy that comprl-gym's sandbox copies into a size-limited tmpfs.
        f"COPY --chown={SANDBOX_UID}:{SANDBOX_UID} testbed /opt/comprl-testbed\n"
        "WORKDIR /testbed\n"
        f"ENV PYTHONPATH={pythonpath} PYTHONDONTWRITEBYTECODE=1\n"
    )
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(dockerfile.encode())
        tar.addfile(info, io.BytesIO(dockerfile.encode()))
        tar.add(testbed, arcname="testbed")
    context.seek(0)
    logger.info("building image %s", name)
    try:
        client.images.build(
            fileobj=context,
            custom_context=True,
            tag=name,
            labels=labels,
            rm=True,
            forcerm=True,
            network_mode="none",
        )
    except Exception as exc:  # docker.errors.BuildError, APIError
        raise EnvBackendError(f"building the image {name} failed: {exc}") from exc
    return name


# ---- disk budget ------------------------------------------------------------------------------
def _usage_file() -> Path:
    return cache_dir("swebench") / "image-usage.json"


def touch_image(name: str) -> None:
    """Record that an image was just used (for least-recently-used pruning)."""
    path = _usage_file()
    with file_lock(path.with_suffix(".lock")):
        try:
            usage = json.loads(path.read_text())
        except (OSError, ValueError):
            usage = {}
        usage[name] = time.time()
        atomic_write_json(path, usage)


def prune_images(client: Any, budget_bytes: int, keep: tuple[str, ...] = ()) -> list[str]:
    """Remove comprl-gym instance images and pulled official ones, least recently used first,
    until their total size (beyond the shared base) fits in ``budget_bytes``. Images in
    ``keep`` or in use stay.

    Returns the names removed.
    """
    import docker

    images = client.images.list(filters={"label": f"{LABEL}=instance"})
    try:
        base_size = client.images.get(base_image_tag()).attrs.get("Size", 0)
    except docker.errors.ImageNotFound:
        base_size = 0
    try:
        usage = json.loads(_usage_file().read_text())
    except (OSError, ValueError):
        usage = {}
    # Official images we pulled count against the budget too (whole size: no shared base).
    ours = {image.id for image in images}
    pulled = []
    for name in usage:
        if "sweb.eval." not in name:
            continue
        try:
            image = client.images.get(name)
        except docker.errors.ImageNotFound:
            continue
        if image.id not in ours and (image.labels or {}).get(LABEL) is None:
            ours.add(image.id)
            pulled.append(image)
    in_use = {c.image.id for c in client.containers.list(all=True) if c.image is not None}
    sized = []
    for image in images + pulled:
        shared = int(base_size) if image in images else 0
        own = max(0, int(image.attrs.get("Size", 0)) - shared)
        names = image.tags or [image.id]
        last_use = max(usage.get(name, 0.0) for name in names)
        sized.append((last_use, names, own, image))
    total = sum(own for _, _, own, _ in sized)
    removed: list[str] = []
    for _, names, own, image in sorted(sized, key=lambda item: item[0]):
        if total <= budget_bytes:
            break
        if any(name in keep for name in names) or image.id in in_use:
            continue
        try:
            for name in names:  # one image may carry the names of several instances
                client.images.remove(name, force=False)
        except docker.errors.APIError as exc:
            logger.warning("could not prune %s: %s", names, exc)
            continue
        total -= own
        removed.extend(names)
        logger.info("pruned image %s (%d bytes) to stay within the disk budget", names, own)
    return removed

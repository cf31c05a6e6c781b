"""Real container runtimes (podman, containerd + ctr) with ebpf-masq in their CNI chain.

Each runtime is private to one test: its own config, storage, state and sockets
under the lab's tmp dir, and it runs inside the lab's node namespace
(`nsenter --net`), so the CNI plugins it executes (bridge, host-local,
ebpf-masq) create the bridge and attach the uplink programs there, never on the
machine's own interfaces.

What each runtime could otherwise touch on the machine, and how it is kept off:
  podman   CNI config/plugins: containers.conf [network] network_config_dir and
           cni_plugin_dirs. Storage: --root/--runroot (vfs). Locks: lock_type
           "file" under tmp_dir (else a /dev/shm/libpod_lock segment). runc
           state: a wrapper runtime adding `runc --root` (podman's
           --runtime-flag is not passed to its cleanup `runc delete`, which
           leaves state behind). Blob-info cache: `podman import` writes
           /var/lib/containers/cache whatever the storage root, so the import
           runs in a private mount namespace with that directory shadowed.
           Cgroups: --cgroup-parent unique to the test, removed afterwards.
  ctr      `ctr run --cni` reads /etc/cni/net.d and /opt/cni/bin (go-cni
           defaults, no flag or variable changes them), so ctr runs in a private
           mount namespace with tmp dirs bind-mounted over those paths there only.
  containerd  root/state/sockets in tmp; the runc shim puts its socket under the
           fixed /run/containerd/s, so containerd runs in a private mount
           namespace with a tmpfs on /run.
"""
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from .netlab import CNI_BIN_DIR, CNI_VERSION, REPO, sh, wait_for

IMAGE_SCRIPT = REPO / "scripts/make-test-image.sh"
IMAGE = "localhost/ebpf-masq-test:latest"
TOOLS = {
    "podman": ("podman", "conmon", "runc", "unshare", "nsenter", "mount"),
    "containerd": ("containerd", "containerd-shim-runc-v2", "ctr", "runc", "unshare", "nsenter", "mount"),
}


def missing_tools(runtime):
    return [t for t in TOOLS[runtime] if not shutil.which(t)]


def build_image(outdir):
    """scripts/make-test-image.sh: returns {"rootfs": tar for podman import, "oci": OCI layout tar}."""
    outdir = Path(outdir)
    sh(["bash", str(IMAGE_SCRIPT), str(outdir), IMAGE])
    paths = {"rootfs": outdir / "rootfs.tar", "oci": outdir / "oci.tar"}
    for p in paths.values():
        assert p.is_file() and p.stat().st_size > 0, f"{IMAGE_SCRIPT} did not write {p}"
    return paths


def shadow(scratch, target, stop):
    """Prepare a bind mount that makes `target` an empty private directory.

    Returns (src, mountpoint, inner): bind-mounting src on mountpoint (the deepest
    existing directory among target and its ancestors up to stop) exposes
    `inner` (a fresh dir under src) at `target`. Only ever used inside a private
    mount namespace, so the machine's own directory is never changed.
    """
    target, stop = Path(target), Path(stop)
    mountpoint = target
    while not mountpoint.is_dir():
        if mountpoint == stop or mountpoint == mountpoint.parent:
            raise AssertionError(f"cannot shadow {target}: {stop} does not exist on this machine")
        mountpoint = mountpoint.parent
    src = Path(scratch)
    src.mkdir(parents=True)
    inner = src / target.relative_to(mountpoint)
    inner.mkdir(parents=True, exist_ok=True)
    return src, mountpoint, inner


def in_private_mounts(mounts, cmd):
    """cmd run in a new private mount namespace after `mounts`, a list of
    ("bind", src, dst) or ("tmpfs", opts, dst). The mounts vanish with it."""
    script = ["set -e"]
    for kind, a, dst in mounts:
        if kind == "bind":
            script.append(f"mount --bind '{a}' '{dst}'")
        else:
            script.append(f"mount -t tmpfs -o '{a}' ebpf-masq-test '{dst}'")
    script.append('exec "$@"')
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", "\n".join(script), "sh",
            *map(str, cmd)]


def remove_cgroup(path):
    """rmdir a cgroup subtree (v1: in every hierarchy; v2: the unified one), bottom up."""
    rel = path.strip("/")
    roots = [Path("/sys/fs/cgroup") / rel] + [p / rel for p in Path("/sys/fs/cgroup").iterdir() if p.is_dir()]
    errors = []
    for root in roots:
        if not root.is_dir():
            continue
        for dirpath, _, _ in sorted(os.walk(root), key=lambda t: -len(t[0])):
            try:
                os.rmdir(dirpath)
            except OSError as e:
                errors.append(f"{dirpath}: {e}")
    return errors


def umount_under(path):
    """Lazily unmount anything still mounted below path (in this mount namespace)."""
    path = str(Path(path).resolve())
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4] for line in f]
    for mp in sorted((p for p in points if p == path or p.startswith(path + "/")), key=len, reverse=True):
        sh(["umount", "-l", mp], check=False)


def containerd_config(d, sock, enable_cri=False):
    """The head of a private containerd's config.toml: root, state, sockets, opt under d."""
    cri = "" if enable_cri else '"io.containerd.grpc.v1.cri", '
    return f"""\
version = 2
root = "{d}/root"
state = "{d}/state"
disabled_plugins = [{cri}"io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs"]

[grpc]
  address = "{sock}"
[ttrpc]
  address = "{sock}.ttrpc"
[debug]
  address = ""
  level = "info"
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/opt"
"""


def containerd_cmd(node, config):
    """containerd in node's netns, in a private mount namespace with a tmpfs on /run
    (the runc shim puts its socket under the fixed /run/containerd/s)."""
    return ["nsenter", f"--net={node.path}", "--",
            *in_private_mounts([("tmpfs", "mode=0755,size=16m", "/run")],
                               ["sh", "-c", 'mkdir -p /run/containerd && exec "$@"', "sh",
                                "containerd", "--config", config])]


def shim_pids(sock):
    """PIDs of the shims serving the containerd at sock (their command line names it)."""
    pids = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                argv = (p / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"-address" in argv and str(sock).encode() in argv:
                pids.append(int(p.name))
    return pids


def stop_containerd(lab, proc, sock, d, sockdir, cgroup_parent):
    """Stop a private containerd (by PID), kill shims it left, remove its root,
    state, opt, socket dir and cgroup. Returns what went wrong, as strings."""
    errors = []
    lab.stop(proc)
    for pid in shim_pids(sock):  # only if a task or sandbox could not be removed
        errors.append(f"shim {pid} still running: killed")
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    time.sleep(0.1)
    for p in ("root", "state", "opt"):
        shutil.rmtree(d / p, ignore_errors=True)
    shutil.rmtree(sockdir, ignore_errors=True)
    return errors + remove_cgroup(cgroup_parent)


def drop_cni_cache(net_name):
    """libcni's cached results of net_name (left behind only when a DEL failed)."""
    for p in Path("/var/lib/cni/results").glob(f"{net_name}-*"):
        p.unlink()


def masq_conflist(name, bridge, subnet, ipam_dir, **masq_keys):
    """bridge (no ipMasq) + host-local + ebpf-masq with masq_keys."""
    return {"cniVersion": CNI_VERSION, "name": name, "plugins": [
        {"type": "bridge", "bridge": bridge, "isGateway": True, "ipMasq": False,
         "ipam": {"type": "host-local", "subnet": subnet, "routes": [{"dst": "0.0.0.0/0"}],
                  "dataDir": str(ipam_dir)}},
        {"type": "ebpf-masq", **masq_keys}]}


class Background:
    """A runtime client (podman run / ctr run) running in the background."""

    def __init__(self, lab, cmd, env=None):
        self.lab = lab
        self.out = tempfile.TemporaryFile(mode="w+")
        self.proc = lab.spawn(cmd, env=env, stdout=self.out, stderr=subprocess.STDOUT)

    def alive(self):
        return self.proc.poll() is None

    def output(self):
        self.out.seek(0)
        return self.out.read()

    def wait(self, timeout=60):
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"runtime client still running after {timeout}s:\n{self.output()}")
        return rc, self.output()


class Podman:
    """A private podman (CNI backend) whose commands run in the node namespace."""

    def __init__(self, lab, node, cni_plugin_dir):
        self.lab, self.node = lab, node
        self.dir = d = lab.tmp / "podman"
        # podman refuses a runroot longer than 50 characters (conmon's socket paths)
        self.state = s = Path(tempfile.mkdtemp(prefix=f"{lab.prefix}podman-", dir="/tmp"))
        self.root, self.runroot, self.tmpdir, self.runc_root = s / "root", s / "run", s / "tmp", s / "runc"
        self.netconf = d / "net.d"
        for p in (self.root, self.runroot, self.tmpdir, self.netconf, self.runc_root):
            p.mkdir(parents=True)
        self.cgroup_parent = f"/{lab.prefix}podman"
        wrapper = d / "runc-private"
        wrapper.write_text(f"#!/bin/sh\nexec {shutil.which('runc')} --root '{self.runc_root}' \"$@\"\n")
        wrapper.chmod(0o755)
        (d / "containers.conf").write_text(f"""\
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]

[network]
network_backend = "cni"
cni_plugin_dirs = ["{CNI_BIN_DIR}", "{cni_plugin_dir}"]
network_config_dir = "{self.netconf}"

[engine]
runtime = "runc-private"
cgroup_manager = "cgroupfs"
events_logger = "file"
lock_type = "file"
tmp_dir = "{self.tmpdir}"
volume_path = "{self.root}/volumes"

[engine.runtimes]
runc-private = ["{wrapper}"]
""")
        (d / "storage.conf").write_text(f"""\
[storage]
driver = "vfs"
graphroot = "{self.root}"
runroot = "{self.runroot}"
""")
        (d / "registries.conf").write_text("unqualified-search-registries = []\n")
        self.env = {**os.environ, "CONTAINERS_CONF": str(d / "containers.conf"),
                    "CONTAINERS_STORAGE_CONF": str(d / "storage.conf"),
                    "CONTAINERS_REGISTRIES_CONF": str(d / "registries.conf")}
        self.networks = []
        lab.on_close(self.close)

    def argv(self, *args):
        return ["podman", "--root", self.root, "--runroot", self.runroot, "--storage-driver", "vfs",
                "--tmpdir", self.tmpdir, "--cgroup-manager", "cgroupfs", *args]

    def __call__(self, *args, check=True, timeout=120):
        """podman ARGS in the node namespace."""
        return self.node.enter(self.argv(*args), env=self.env, check=check, timeout=timeout)

    def import_image(self, rootfs_tar, name=IMAGE):
        src, mp, _ = shadow(self.dir / "varlib-containers", "/var/lib/containers", "/var/lib")
        sh(in_private_mounts([("bind", src, mp)], self.argv("import", "--quiet", rootfs_tar, name)),
           env=self.env)
        assert name in self("images", "--format", "{{.Repository}}:{{.Tag}}").stdout.split()

    def add_network(self, conflist):
        self.networks.append(conflist["name"])
        (self.netconf / f"{conflist['name']}.conflist").write_text(json.dumps(conflist, indent=2))

    def run_bg(self, *args):
        """`podman run ARGS` in the node namespace, in the background."""
        return Background(self.lab, ["nsenter", f"--net={self.node.path}", "--",
                                     *map(str, self.argv("run", *args))], env=self.env)

    def close(self):
        errors = []
        for args in (("rm", "--all", "--force", "--time", "0"), ("rmi", "--all", "--force")):
            p = self(*args, check=False, timeout=60)
            if p.returncode != 0:
                errors.append(f"podman {' '.join(args)}: {p.stderr.strip()}")
        umount_under(self.state)
        shutil.rmtree(self.state, ignore_errors=True)
        errors += remove_cgroup(self.cgroup_parent)
        for name in self.networks:
            drop_cni_cache(name)
        if errors:
            raise AssertionError("podman cleanup: " + "; ".join(errors))


class Containerd:
    """A private containerd in the node namespace, driven with ctr."""

    def __init__(self, lab, node):
        self.lab, self.node = lab, node
        self.ns = f"{lab.prefix}ctr"  # containerd namespace
        self.dir = d = lab.tmp / "containerd"
        self.fifo, self.runc_root = d / "fifo", d / "runc"
        for p in (self.fifo, self.runc_root):
            p.mkdir(parents=True)
        # unix socket paths are limited to 108 bytes; pytest's tmp paths can be long
        self.sockdir = Path(tempfile.mkdtemp(prefix=f"{lab.prefix}ctd-", dir="/tmp"))
        self.sock = self.sockdir / "containerd.sock"
        self.cgroup_parent = f"/{lab.prefix}ctr"
        self.containers, self.networks = [], []
        self.cni_conf = self.cni_bin = None
        (d / "config.toml").write_text(containerd_config(d, self.sock))
        self.log = d / "containerd.log"
        # private /run: the shim's socket goes to /run/containerd/s/, a fixed path
        with open(self.log, "w") as log:
            self.proc = lab.spawn(containerd_cmd(node, d / "config.toml"), stdout=log, stderr=subprocess.STDOUT)
        lab.on_close(self.close)

        def ready():
            assert self.proc.poll() is None, f"containerd exited:\n{self.log.read_text()}"
            return self.sock.exists() and self.ctr("version", check=False).returncode == 0
        wait_for(ready, timeout=20, what="containerd")

    def ctr(self, *args, check=True, timeout=120):
        return sh(["ctr", "--address", self.sock, "--namespace", self.ns, *map(str, args)],
                  check=check, timeout=timeout)

    def import_image(self, oci_tar, name=IMAGE):
        self.ctr("images", "import", "--snapshotter", "native", oci_tar)
        assert name in self.ctr("images", "list", "--quiet").stdout.split()

    def set_cni(self, conflist, plugin):
        """What `ctr run --cni` will see at /etc/cni/net.d and /opt/cni/bin (privately)."""
        self.networks.append(conflist["name"])
        self.cni_conf = shadow(self.dir / "shadow-etc-cni", "/etc/cni/net.d", "/etc/cni")
        self.cni_bin = shadow(self.dir / "shadow-opt", "/opt/cni/bin", "/opt")
        (self.cni_conf[2] / f"10-{conflist['name']}.conflist").write_text(json.dumps(conflist, indent=2))
        for p in Path(CNI_BIN_DIR).iterdir():
            (self.cni_bin[2] / p.name).symlink_to(p)
        (self.cni_bin[2] / "ebpf-masq").symlink_to(Path(plugin).resolve())

    def run_cni_bg(self, cid, command, options=()):
        """`ctr run --rm --cni OPTIONS IMAGE CID COMMAND...` in the node namespace, in the background."""
        assert self.cni_conf, "set_cni() first"
        self.containers.append(cid)
        binds = [("bind", src, mp) for src, mp, _ in (self.cni_conf, self.cni_bin)]
        ctr = ["ctr", "--address", self.sock, "--namespace", self.ns, "run", "--rm", "--cni",
               "--snapshotter", "native", "--runc-root", self.runc_root, "--fifo-dir", self.fifo,
               "--cgroup", f"{self.cgroup_parent}/{cid}", *options, IMAGE, cid, *command]
        return Background(self.lab, in_private_mounts(binds, ["nsenter", f"--net={self.node.path}", "--", *ctr]))

    def shim_pids(self):
        return shim_pids(self.sock)

    def close(self):
        errors = []
        if self.proc.poll() is None:
            for cid in self.containers:
                self.ctr("tasks", "kill", "--signal", "SIGKILL", cid, check=False)
                self.ctr("tasks", "delete", "--force", cid, check=False)
                self.ctr("containers", "delete", cid, check=False)
            p = self.ctr("images", "remove", IMAGE, check=False)
            if p.returncode != 0 and "not found" not in p.stderr:
                errors.append(f"ctr images remove: {p.stderr.strip()}")
            left = self.ctr("containers", "list", "--quiet", check=False).stdout.split()
            if left:
                errors.append(f"containers left: {left}")
        errors += stop_containerd(self.lab, self.proc, self.sock, self.dir, self.sockdir, self.cgroup_parent)
        for name in self.networks:
            drop_cni_cache(name)
        if errors:
            raise AssertionError("containerd cleanup: " + "; ".join(errors))

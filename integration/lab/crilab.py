"""containerd's CRI plugin, driven as kubelet drives it, with ebpf-masq in its CNI chain.

kubelet never runs a CNI plugin itself: it calls RunPodSandbox / StopPodSandbox /
RemovePodSandbox on the CRI socket, and containerd's CRI plugin runs the chain
through go-cni, with CNI_ARGS (K8S_POD_NAMESPACE, K8S_POD_NAME, ...) and, for the
capabilities the conflist declares, runtimeConfig (io.kubernetes.cri.pod-annotations).
Here one private containerd (Debian's 1.6, its CRI plugin enabled) runs inside the
lab's node namespace, in a private mount namespace with a tmpfs on /run, as
runtimelab.Containerd does; its CNI conf and bin dirs are the test's own
directories (the CRI plugin takes them from its config). The client is the CRI v1
gRPC API from the PyPI package container-runtime-interface-api (cri_api).

Notes: the sandbox image must block forever (make-test-image.sh CMD_JSON); root
here lacks CAP_SYS_RESOURCE, so restrict_oom_score_adj; the pod netns is mounted
inside containerd's mount namespace, so it is reached as /proc/<sandbox pid>/ns/net;
go-cni needs the `loopback` plugin in the bin dir.
"""
import json
import tempfile
from pathlib import Path

from .netlab import CNI_BIN_DIR, REPO, sh, wait_for
from .runtimelab import containerd_cmd, containerd_config, drop_cni_cache, stop_containerd

SANDBOX_IMAGE = "localhost/ebpf-masq-pause:latest"
K8S_NS = "k8s.io"  # the containerd namespace the CRI plugin uses


class CriContainerd:
    def __init__(self, lab, node, conflist, plugin):
        import grpc
        from cri_api.v1 import api_pb2, api_pb2_grpc

        self.lab, self.node, self.pb = lab, node, api_pb2
        self.dir = d = lab.tmp / "cri"
        self.conf_dir, self.bin_dir = d / "net.d", d / "bin"
        for p in (self.conf_dir, self.bin_dir):
            p.mkdir(parents=True)
        self.network = conflist["name"]
        (self.conf_dir / f"10-{self.network}.conflist").write_text(json.dumps(conflist, indent=2))
        for p in Path(CNI_BIN_DIR).iterdir():
            (self.bin_dir / p.name).symlink_to(p)
        (self.bin_dir / "ebpf-masq").symlink_to(Path(plugin).resolve())
        self.sockdir = Path(tempfile.mkdtemp(prefix=f"{lab.prefix}cri-", dir="/tmp"))
        self.sock = self.sockdir / "containerd.sock"
        self.cgroup_parent = f"/{lab.prefix}cri"
        self.sandboxes = []
        (d / "config.toml").write_text(containerd_config(d, self.sock, enable_cri=True) + f"""\
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{SANDBOX_IMAGE}"
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{d}/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{self.bin_dir}"
    conf_dir = "{self.conf_dir}"
    max_conf_num = 1
""")
        self.log = d / "containerd.log"
        with open(self.log, "w") as log:
            self.proc = lab.spawn(containerd_cmd(node, d / "config.toml"), stdout=log, stderr=log)
        lab.on_close(self.close)

        def up():
            assert self.proc.poll() is None, f"containerd exited:\n{self.log.read_text()}"
            return self.sock.exists() and self.ctr("version", check=False).returncode == 0
        wait_for(up, timeout=30, what="containerd")
        # The sandbox image, into the CRI plugin's namespace.
        sh(["bash", str(REPO / "scripts/make-test-image.sh"), str(d / "image"), SANDBOX_IMAGE,
            '["/bin/sleep","2147483647"]'])
        self.ctr("images", "import", "--snapshotter", "native", d / "image/oci.tar")
        self.channel = grpc.insecure_channel(f"unix://{self.sock}")
        self.rt = api_pb2_grpc.RuntimeServiceStub(self.channel)

        def cri_ready():
            assert self.proc.poll() is None, f"containerd exited:\n{self.log.read_text()}"
            try:
                st = self.rt.Status(api_pb2.StatusRequest(), timeout=5)
            except grpc.RpcError:
                return False
            return all(c.status for c in st.status.conditions)
        wait_for(cri_ready, timeout=30, what="CRI runtime and network ready")

    def ctr(self, *args, check=True, timeout=120):
        return sh(["ctr", "--address", self.sock, "--namespace", K8S_NS, *map(str, args)], check=check, timeout=timeout)

    def run_pod_sandbox(self, name, namespace, annotations=None, host_ports=()):
        """RunPodSandbox as kubelet sends it; returns the sandbox id. host_ports:
        (hostPort, containerPort, "tcp"|"udp") for the sandbox's port_mappings."""
        pb = self.pb
        uid = f"uid-{name}"
        proto = {"tcp": pb.TCP, "udp": pb.UDP}
        cfg = pb.PodSandboxConfig(
            metadata=pb.PodSandboxMetadata(name=name, uid=uid, namespace=namespace, attempt=0),
            port_mappings=[pb.PortMapping(protocol=proto[p], container_port=c, host_port=h) for h, c, p in host_ports],
            hostname=name,
            log_directory=str(self.dir / "logs" / uid),
            annotations=annotations or {},
            labels={"io.kubernetes.pod.name": name, "io.kubernetes.pod.namespace": namespace},
            linux=pb.LinuxPodSandboxConfig(cgroup_parent=f"{self.cgroup_parent}/{uid}"),
        )
        self.sandboxes.append(cfg)
        resp = self.rt.RunPodSandbox(pb.RunPodSandboxRequest(config=cfg), timeout=120)
        return resp.pod_sandbox_id

    def status(self, sid):
        """(status message, info dict) of PodSandboxStatus with verbose info."""
        r = self.rt.PodSandboxStatus(self.pb.PodSandboxStatusRequest(pod_sandbox_id=sid, verbose=True), timeout=30)
        return r.status, json.loads(r.info.get("info", "{}"))

    def netns(self, sid):
        """The sandbox's network namespace, as a path this mount namespace can open."""
        _, info = self.status(sid)
        return f"/proc/{info['pid']}/ns/net"

    def stop(self, sid):
        self.rt.StopPodSandbox(self.pb.StopPodSandboxRequest(pod_sandbox_id=sid), timeout=120)

    def remove(self, sid):
        self.rt.RemovePodSandbox(self.pb.RemovePodSandboxRequest(pod_sandbox_id=sid), timeout=120)

    def list_sandboxes(self):
        return list(self.rt.ListPodSandbox(self.pb.ListPodSandboxRequest(), timeout=30).items)

    def close(self):
        errors = []
        if self.proc.poll() is None:
            try:
                for sb in self.list_sandboxes():
                    self.stop(sb.id)
                    self.remove(sb.id)
            except Exception as e:  # keep cleaning up
                errors.append(f"sandbox cleanup: {e!r}")
            self.channel.close()
        errors += stop_containerd(self.lab, self.proc, self.sock, self.dir, self.sockdir, self.cgroup_parent)
        drop_cni_cache(self.network)
        if errors:
            raise AssertionError("CRI containerd cleanup: " + "; ".join(errors))

    def netns_files(self):
        """The network namespaces containerd holds (its /run/netns, inside its own mount
        namespace, read through /proc/<containerd pid>/root), sorted."""
        d = Path(f"/proc/{self.proc.pid}/root/run/netns")
        return sorted(p.name for p in d.iterdir()) if d.is_dir() else []

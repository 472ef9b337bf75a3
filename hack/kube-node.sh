#!/usr/bin/env bash
# A one-node Kubernetes cluster on this machine, for the tests and benches, and its removal.
#
#   hack/kube-node.sh up     start it; returns once the node is Ready
#   hack/kube-node.sh down   stop it and remove everything it made
#
# `up` prints, as its last three lines:
#   CONTAINERD_CONFIG=/path   the node's containerd config file
#   CONTAINERD_ADDRESS=/path  its socket
#   KUBECONFIG=/path          an admin kubeconfig (system:masters)
#
# What runs: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubelet at the
# versions of hack/versions.env (built by hack/deps.sh), and a private containerd 2.x as the
# node's runtime (config version 3, runc the default handler, SystemdCgroup = false). Everything
# lives in GVH_KUBE_DIR (default /run/gvisor-hardened-kube): certificates and keys made here
# with openssl, kubeconfigs, etcd's data, containerd's root and state, kubelet's root and the
# pods' logs. Every server listens on 127.0.0.1 only, on ports picked free at `up`.
#
# Host-global things it makes, all named after it and removed by `down`:
#   the bridge gvhkube0 (10.190.0.1/24, the node's InternalIP; kubelet refuses a loopback one)
#   and the pods' veths on it; the cgroups /gvh-kube (kubelet's cgroupRoot) and /gvh-kube-node
#   (containerd); the pods' network namespaces under /run/netns; kubelet's links in
#   /var/log/containers; one iptables DNAT rule (comment gvh-kube) that gives pods the API
#   server at its Service address, since no kube-proxy runs (see api_for_pods).
# The pod network is the CNI bridge and host-local plugins on 10.190.0.0/24, with no gateway,
# no masquerading and no default route: no pod traffic leaves the machine.
#
# Restarting the node's containerd (what the installer DaemonSet's --restart-command does):
#   <GVH_KUBE_DIR>/restart-containerd.sh
# The installer image (deploy/build-image.sh) is imported under the reference
# deploy/kustomize/default renders. On this node the DaemonSet needs its host paths pointed at the
# node's directory (an overlay setting the installer's GVH_* variables, see
# tests/src/kube/overlay.rs): the defaults are the machine's own /etc/containerd and friends.
# It stops containerd (SIGTERM, pods keep running: their shims are not its children) and starts
# it again on the same config, detached and in the /gvh-kube-node cgroups, so it outlives the
# caller and the caller's pod.
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DIR="${GVH_KUBE_DIR:-/run/gvisor-hardened-kube}"
# kubectl keeps its discovery and HTTP caches in the node's directory, not in ~/.kube (which
# outlives the node, and which the attack tests watch for host changes).
export KUBECACHEDIR="$DIR/kubectl-cache"
BRIDGE=gvhkube0
# Inside the harness's pod range (tests/src/public_targets.rs CRI_POD_RANGE, 10.128.0.0/10).
NODE_IP=10.190.0.1
POD_SUBNET=10.190.0.0/24
SERVICE_RANGE=10.191.0.0/24
API_SERVICE_IP=10.191.0.1
NODE_NAME=localhost
KUBE_CGROUP=gvh-kube
CONTAINERD_CGROUP=gvh-kube-node
PAUSE_IMAGE=localhost/gvh-pause:latest
IPT_COMMENT=gvh-kube
# The service-account tokens' issuer: an identifier, never fetched.
SA_ISSUER=https://kubernetes.default.svc.cluster.local # net-scan: data

usage() {
  sed -n '2,30p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit "${1:-0}"
}

# ---------------------------------------------------------------------------------------------
# Binaries

declare -A BIN
load_deps() {
  local name path
  ensure_go
  while IFS='=' read -r name path; do BIN[$name]=$path; done < <(
    "$HACK_DIR/deps.sh" --only containerd --only ctr --only containerd-shim-runc-v2 --only runsc \
      --only kube-apiserver --only kube-controller-manager --only kube-scheduler --only kubelet \
      --only kubectl --only etcd --only cni-bridge --only cni-host-local --only cni-loopback)
}

# ---------------------------------------------------------------------------------------------
# Processes: each started detached (setsid) with its pid in $DIR/pids/<name>.

pidfile() { echo "$DIR/pids/$1"; }

alive() {
  local f
  f="$(pidfile "$1")"
  [ -f "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null
}

# start NAME CMD...: runs CMD detached, logging to $DIR/logs/NAME.log.
start() {
  local name=$1
  shift
  setsid "$@" >>"$DIR/logs/$name.log" 2>&1 </dev/null &
  echo $! >"$(pidfile "$name")"
}

# wait_for WHAT SECONDS CMD...: polls CMD every 0.2 s until it succeeds.
wait_for() {
  local what=$1 secs=$2 deadline
  shift 2
  deadline=$(($(date +%s) + secs))
  until "$@" >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      log "timed out after ${secs}s waiting for $what; the logs' tails:"
      tail -n 20 "$DIR"/logs/*.log >&2 || true
      die "$what did not come up"
    fi
    sleep 0.2
  done
}

free_ports() {
  python3 - "$1" <<'EOF'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

# ---------------------------------------------------------------------------------------------
# Certificates and kubeconfigs

# cert NAME SUBJECT [SAN]: a P-256 key and a certificate signed by the cluster CA.
cert() {
  local name=$1 subj=$2 san=${3:-} pki=$DIR/pki ext
  openssl ecparam -name prime256v1 -genkey -noout -out "$pki/$name.key" 2>/dev/null
  openssl req -new -key "$pki/$name.key" -subj "$subj" -out "$pki/$name.csr" 2>/dev/null
  ext="$pki/$name.ext"
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    if [ -n "$san" ]; then
      echo "extendedKeyUsage=serverAuth,clientAuth"
      echo "subjectAltName=$san"
    else
      echo "extendedKeyUsage=clientAuth"
    fi
  } >"$ext"
  openssl x509 -req -in "$pki/$name.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
    -days 30 -sha256 -extfile "$ext" -out "$pki/$name.crt" 2>/dev/null
  rm -f "$pki/$name.csr" "$ext"
}

make_pki() {
  local pki=$DIR/pki
  mkdir -p "$pki"
  openssl ecparam -name prime256v1 -genkey -noout -out "$pki/ca.key" 2>/dev/null
  openssl req -x509 -new -key "$pki/ca.key" -subj "/CN=gvh-kube-ca" -days 30 -sha256 \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out "$pki/ca.crt" 2>/dev/null
  cert apiserver "/CN=kube-apiserver" \
    "IP:127.0.0.1,IP:$API_SERVICE_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  cert kubelet-serving "/CN=$NODE_NAME" "IP:127.0.0.1,DNS:localhost"
  cert admin "/O=system:masters/CN=gvh-admin"
  cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
  cert controller-manager "/CN=system:kube-controller-manager"
  cert scheduler "/CN=system:kube-scheduler"
  cert kubelet "/O=system:nodes/CN=system:node:$NODE_NAME"
  # The service-account token signing key pair.
  openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$pki/sa.key" 2>/dev/null
  openssl pkey -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
  chmod 600 "$pki"/*.key
}

# kubeconfig NAME CERT: $DIR/NAME.kubeconfig for the user of pki/CERT.{crt,key}.
kubeconfig() {
  local f="$DIR/$1.kubeconfig" k=("${BIN[kubectl]}" config --kubeconfig "$DIR/$1.kubeconfig")
  "${k[@]}" set-cluster gvh --server "https://127.0.0.1:$API_PORT" \
    --certificate-authority "$DIR/pki/ca.crt" --embed-certs >/dev/null
  "${k[@]}" set-credentials "$2" --client-certificate "$DIR/pki/$2.crt" \
    --client-key "$DIR/pki/$2.key" --embed-certs >/dev/null
  "${k[@]}" set-context gvh --cluster gvh --user "$2" >/dev/null
  "${k[@]}" use-context gvh >/dev/null
  chmod 600 "$f"
}

# ---------------------------------------------------------------------------------------------
# The host side: bridge, cgroups, the API server for pods

cgroup_hierarchies() {
  local d
  for d in /sys/fs/cgroup/*/; do
    d=${d%/}
    [ -L "$d" ] && continue
    [ -f "$d/cgroup.procs" ] && echo "$d"
  done
}

make_host_side() {
  local h
  ip link add "$BRIDGE" type bridge
  ip addr add "$NODE_IP/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  for h in $(cgroup_hierarchies); do
    mkdir -p "$h/$KUBE_CGROUP" "$h/$CONTAINERD_CGROUP"
  done
  # cpuset children start empty on cgroup v1: copy the parent's.
  for h in $KUBE_CGROUP $CONTAINERD_CGROUP; do
    if [ -d "/sys/fs/cgroup/cpuset/$h" ]; then
      cat /sys/fs/cgroup/cpuset/cpuset.cpus >"/sys/fs/cgroup/cpuset/$h/cpuset.cpus"
      cat /sys/fs/cgroup/cpuset/cpuset.mems >"/sys/fs/cgroup/cpuset/$h/cpuset.mems"
    fi
  done
}

# The API server for pods: in-cluster clients (the installer DaemonSet) dial the `kubernetes`
# Service, and with no kube-proxy nothing routes that address. The pods' CNI config routes the
# Service range to the bridge; this rule sends the API server's Service port on to the API server
# on 127.0.0.1, which route_localnet (on our bridge only) allows for packets from the bridge.
api_for_pods() {
  sysctl -qw "net.ipv4.conf.$BRIDGE.route_localnet=1"
  iptables -t nat -A PREROUTING -i "$BRIDGE" -d "$API_SERVICE_IP" -p tcp --dport 443 \
    -m comment --comment "$IPT_COMMENT" -j DNAT --to-destination "127.0.0.1:$API_PORT"
}

# ---------------------------------------------------------------------------------------------
# The node's containerd

write_containerd_config() {
  local c=$DIR/containerd rt='plugins."io.containerd.cri.v1.runtime"'
  mkdir -p "$c/root" "$c/state" "$c/tmp" "$c/runc" "$DIR/cni/conf" "$DIR/cni/ipam"
  cat >"$c/config.toml" <<EOF
# The node's containerd (hack/kube-node.sh). Everything of it lives under $DIR.
version = 3
root = "$c/root"
state = "$c/state"
temp = "$c/tmp"
# NRI listens on a host-global socket; /opt and the unused snapshotters stay out.
disabled_plugins = [
  "io.containerd.nri.v1.nri",
  "io.containerd.internal.v1.opt",
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing",
]

[grpc]
  address = "$c/containerd.sock"

[ttrpc]
  address = "$c/containerd.sock.ttrpc"

[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = "$PAUSE_IMAGE"

[$rt]
  # Root on these machines lacks CAP_SYS_RESOURCE; there is no AppArmor or SELinux.
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  [$rt.containerd]
    default_runtime_name = "runc"
    [$rt.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [$rt.containerd.runtimes.runc.options]
        # kubelet runs with cgroupDriver: cgroupfs (no systemd here).
        SystemdCgroup = false
        Root = "$c/runc"
  [$rt.cni]
    bin_dirs = ["$(dirname "${BIN[cni-bridge]}")"]
    conf_dir = "$DIR/cni/conf"

[plugins."io.containerd.grpc.v1.cri"]
  # Streaming (exec, attach, port-forward) on loopback, on a port picked free at up and kept
  # across restarts (with "0" each restart moves it, and an exec URL handed out just before a
  # restart points nowhere).
  stream_server_address = "127.0.0.1"
  stream_server_port = "$STREAM_PORT"
EOF
  cat >"$DIR/cni/conf/10-gvh-kube.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "gvh-kube",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": false,
      "ipMasq": false,
      "ipam": {
        "type": "host-local",
        "ranges": [[{ "subnet": "$POD_SUBNET", "gateway": "$NODE_IP" }]],
        "routes": [{ "dst": "$SERVICE_RANGE", "gw": "$NODE_IP" }],
        "dataDir": "$DIR/cni/ipam"
      }
    },
    { "type": "loopback" }
  ]
}
EOF
}

# The restart command for the installer (and for the tests): stop, then start on the same
# config, in our cgroups, detached. The shims (and so the pods) keep running meanwhile.
write_restart_script() {
  # containerd finds its runc shim, and our shim finds runsc, on PATH: the stack's, whatever
  # PATH the caller (a test, the installer's pod) has.
  local path
  path="$(dirname "${BIN[containerd]}"):$(dirname "${BIN[runsc]}"):/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
  cat >"$DIR/restart-containerd.sh" <<EOF
#!/bin/sh
# Restarts the node's containerd (written by hack/kube-node.sh up). Returns once the new one
# answers on its socket. The installer DaemonSet runs it as its --restart-command.
set -eu
pidfile="$DIR/pids/containerd"
if [ -f "\$pidfile" ]; then
  pid=\$(cat "\$pidfile")
  kill -TERM "\$pid" 2>/dev/null || true
  i=0
  while kill -0 "\$pid" 2>/dev/null; do
    i=\$((i + 1))
    [ \$i -lt 300 ] || kill -KILL "\$pid" 2>/dev/null || true
    sleep 0.1
  done
fi
$(declare -f cgroup_hierarchies)
for h in \$(cgroup_hierarchies); do echo \$\$ >"\$h/$CONTAINERD_CGROUP/cgroup.procs"; done
rm -f "$DIR/containerd/containerd.sock"
PATH="$path" setsid "${BIN[containerd]}" --config "$DIR/containerd/config.toml" \\
  >>"$DIR/logs/containerd.log" 2>&1 </dev/null &
echo \$! >"\$pidfile"
i=0
until "${BIN[ctr]}" --address "$DIR/containerd/containerd.sock" version >/dev/null 2>&1; do
  i=\$((i + 1))
  [ \$i -lt 300 ] || { echo "containerd did not come back" >&2; exit 1; }
  sleep 0.1
done
EOF
  chmod 755 "$DIR/restart-containerd.sh"
}

pause_image() {
  local work=$DIR/images/pause
  mkdir -p "$work/rootfs/dev" "$work/rootfs/proc" "$work/rootfs/sys" "$work/rootfs/etc"
  gcc -static -O2 -s -Wall -Wextra -Werror -o "$work/rootfs/pause" "$REPO_ROOT/tests/pause/pause.c"
  python3 "$HACK_DIR/oci-archive.py" "$DIR/images/pause.tar" "$PAUSE_IMAGE" /pause "$work/rootfs"
  ctr_k8s images import "$DIR/images/pause.tar" >/dev/null
}

ctr_k8s() { "${BIN[ctr]}" --address "$DIR/containerd/containerd.sock" --namespace k8s.io "$@"; }

# ---------------------------------------------------------------------------------------------
# The control plane and the kubelet

start_etcd() {
  mkdir -m 700 "$DIR/etcd"
  start etcd "${BIN[etcd]}" --name gvh --data-dir "$DIR/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "gvh=http://127.0.0.1:$ETCD_PEER_PORT" \
    --unsafe-no-fsync --log-level warn
}

etcd_healthy() { curl -sf "http://127.0.0.1:$ETCD_PORT/health" | grep -q '"health":"true"'; }

start_apiserver() {
  local p=$DIR/pki
  start kube-apiserver "${BIN[kube-apiserver]}" \
    --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --bind-address 127.0.0.1 --secure-port "$API_PORT" --advertise-address "$NODE_IP" \
    --endpoint-reconciler-type none \
    --service-cluster-ip-range "$SERVICE_RANGE" \
    --client-ca-file "$p/ca.crt" --tls-cert-file "$p/apiserver.crt" --tls-private-key-file "$p/apiserver.key" \
    --kubelet-client-certificate "$p/apiserver-kubelet-client.crt" \
    --kubelet-client-key "$p/apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types Hostname \
    --service-account-issuer "$SA_ISSUER" \
    --service-account-key-file "$p/sa.pub" --service-account-signing-key-file "$p/sa.key" \
    --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
    --allow-privileged=true --profiling=false --cert-dir "$p/apiserver-generated"
}

api_ready() { "${BIN[kubectl]}" --kubeconfig "$DIR/admin.kubeconfig" get --raw /readyz; }

start_controllers() {
  start kube-controller-manager "${BIN[kube-controller-manager]}" \
    --kubeconfig "$DIR/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$DIR/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$DIR/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$CM_PORT" --leader-elect=false \
    --service-account-private-key-file "$DIR/pki/sa.key" --root-ca-file "$DIR/pki/ca.crt" \
    --use-service-account-credentials --service-cluster-ip-range "$SERVICE_RANGE" \
    --cert-dir "$DIR/pki/controller-manager-generated"
  start kube-scheduler "${BIN[kube-scheduler]}" \
    --kubeconfig "$DIR/scheduler.kubeconfig" \
    --authentication-kubeconfig "$DIR/scheduler.kubeconfig" \
    --authorization-kubeconfig "$DIR/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$SCHED_PORT" --leader-elect=false \
    --cert-dir "$DIR/pki/scheduler-generated"
}

start_kubelet() {
  mkdir -p "$DIR/kubelet" "$DIR/pod-logs"
  cat >"$DIR/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
tlsCertFile: $DIR/pki/kubelet-serving.crt
tlsPrivateKeyFile: $DIR/pki/kubelet-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $DIR/pki/ca.crt}
# Only the API server (a system:masters client certificate) reaches it, on loopback.
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix://$DIR/containerd/containerd.sock
# cgroup v1 and no systemd on these machines.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /$KUBE_CGROUP
failSwapOn: false
# No iptables chains of kubelet's own (they would stay in the host's tables).
makeIPTablesUtilChains: false
podLogsDir: $DIR/pod-logs
# The disk is shared with everything else on the machine: no eviction or image GC for disk use.
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
EOF
  start kubelet "${BIN[kubelet]}" --config "$DIR/kubelet.yaml" \
    --kubeconfig "$DIR/kubelet.kubeconfig" --root-dir "$DIR/kubelet" \
    --cert-dir "$DIR/pki/kubelet-generated" \
    --hostname-override "$NODE_NAME" --node-ip "$NODE_IP" --v 2
}

node_ready() {
  "${BIN[kubectl]}" --kubeconfig "$DIR/admin.kubeconfig" get node "$NODE_NAME" \
    -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' | grep -qx True
}

up_failed() {
  local rc=$?
  [ $rc -ne 0 ] || return 0
  log "up failed; taking down what was started (logs kept in $DIR.failed-logs)"
  rm -rf "$DIR.failed-logs"
  cp -r "$DIR/logs" "$DIR.failed-logs" 2>/dev/null
  down_inner
  exit $rc
}

up() {
  require_root
  install_missing openssl iptables iproute2 curl gcc libc6-dev python3 >&2
  if [ -d "$DIR" ]; then
    die "$DIR exists: a node is up (or was not taken down); run hack/kube-node.sh down first"
  fi
  load_deps
  mkdir -p "$DIR/pids" "$DIR/logs" "$DIR/images"
  # If anything below fails, take down what was started (its logs kept in $DIR.failed-logs).
  trap 'up_failed' EXIT

  read -r ETCD_PORT ETCD_PEER_PORT API_PORT CM_PORT SCHED_PORT KUBELET_PORT KUBELET_HEALTHZ_PORT \
    STREAM_PORT < <(free_ports 8)
  log "certificates and keys"
  make_pki
  for pair in admin:admin controller-manager:controller-manager scheduler:scheduler kubelet:kubelet; do
    kubeconfig "${pair%%:*}" "${pair#*:}"
  done

  log "host side: bridge $BRIDGE, cgroups /$KUBE_CGROUP and /$CONTAINERD_CGROUP"
  make_host_side

  log "containerd"
  write_containerd_config
  write_restart_script
  "$DIR/restart-containerd.sh"
  pause_image
  # The installer image, under the reference deploy/kustomize/default renders (a release build
  # of the installer and the shim the first time; cached by content).
  log "the installer image (deploy/build-image.sh)"
  "$REPO_ROOT/deploy/build-image.sh" --import-to "$DIR/containerd/containerd.sock" >&2

  log "etcd, kube-apiserver"
  start_etcd
  wait_for etcd 60 etcd_healthy
  start_apiserver
  wait_for kube-apiserver 120 api_ready
  api_for_pods
  log "kube-controller-manager, kube-scheduler, kubelet"
  start_controllers
  start_kubelet
  wait_for "node $NODE_NAME Ready" 180 node_ready
  trap - EXIT
  log "node $NODE_NAME is Ready"
  echo "CONTAINERD_CONFIG=$DIR/containerd/config.toml"
  echo "CONTAINERD_ADDRESS=$DIR/containerd/containerd.sock"
  echo "KUBECONFIG=$DIR/admin.kubeconfig"
}

# ---------------------------------------------------------------------------------------------
# down

stop() {
  local name=$1 f pid
  f="$(pidfile "$name")"
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  kill -TERM "$pid" 2>/dev/null || { rm -f "$f"; return 0; }
  for _ in $(seq 1 150); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$f"
}

# Every process whose command line, executable or cwd mentions $DIR (shims, runsc, pods'
# processes started from binaries under it), and every process in our cgroups.
our_pids() {
  local p h
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    [ "$p" = $$ ] && continue
    if tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -qF -- "$DIR"; then echo "$p"; fi
  done
  for h in $(cgroup_hierarchies); do
    for d in "$h/$KUBE_CGROUP" "$h/$CONTAINERD_CGROUP"; do
      [ -d "$d" ] && find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null
    done
  done | sort -un
}

down_inner() {
  local kc=$DIR/admin.kubeconfig p h ns
  set +e
  # The controllers first (a DaemonSet would replace its deleted pods), then the pods, through
  # the kubelet, so that it tears their sandboxes down the normal way (CNI DEL, the runtime's
  # delete, log links) while the API server is still there.
  stop kube-controller-manager
  stop kube-scheduler
  if alive kubelet && alive kube-apiserver && [ -f "$kc" ]; then
    "${BIN[kubectl]}" --kubeconfig "$kc" delete pods --all -A --wait=true --timeout 120s \
      --grace-period 5 >/dev/null 2>&1
  fi
  for p in kubelet kube-apiserver etcd containerd; do stop "$p"; done
  for _ in 1 2 3; do
    for p in $(our_pids); do kill -KILL "$p" 2>/dev/null; done
    [ -z "$(our_pids)" ] && break
    sleep 0.5
  done
  # runsc sandboxes of our handlers run from the shim's own roots; their mounts and the pods'
  # network namespaces and volumes are under $DIR or named in containerd's state.
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}'); do
    if grep -qsaF "$ns" -r "$DIR/containerd/root" 2>/dev/null; then
      umount "/run/netns/$ns" 2>/dev/null
      rm -f "/run/netns/$ns"
    fi
  done
  for _ in 1 2 3; do
    awk -v d="$DIR" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo | sort -r \
      | while read -r m; do umount -l "$m" 2>/dev/null; done
    [ -z "$(awk -v d="$DIR" 'index($5, d) == 1' /proc/self/mountinfo)" ] && break
  done
  for h in $(cgroup_hierarchies); do
    for d in "$h/$KUBE_CGROUP" "$h/$CONTAINERD_CGROUP"; do
      [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null
    done
  done
  iptables -t nat -S PREROUTING 2>/dev/null | grep -F -- "--comment $IPT_COMMENT" \
    | sed 's/^-A /-D /' | while read -r rule; do eval "iptables -t nat $rule"; done
  for p in $(ip -o link show master "$BRIDGE" 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1); do
    ip link del "$p" 2>/dev/null
  done
  ip link del "$BRIDGE" 2>/dev/null
  for p in /var/log/containers/*; do
    case "$(readlink "$p" 2>/dev/null)" in "$DIR"/*) rm -f "$p" ;; esac
  done
  rm -rf "$DIR"
  set -e
}

down() {
  require_root
  [ -d "$DIR" ] || { log "no node at $DIR"; return 0; }
  if [ -z "${BIN[kubectl]:-}" ]; then
    BIN[kubectl]=$("$HACK_DIR/deps.sh" --only kubectl | cut -d= -f2)
  fi
  down_inner
  local left=()
  [ -e "$DIR" ] && left+=("$DIR")
  [ -n "$(our_pids)" ] && left+=("processes: $(our_pids | tr '\n' ' ')")
  ip link show "$BRIDGE" >/dev/null 2>&1 && left+=("bridge $BRIDGE")
  [ ${#left[@]} -eq 0 ] || die "down left: ${left[*]}"
  log "node taken down"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  *) usage 2 ;;
esac

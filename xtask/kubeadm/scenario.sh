#!/usr/bin/env bash
# The real kubeadm v1.20.2 on two nodes running the Rust kubelet: `cargo xtask kubeadm` builds
# what this needs and runs it (see xtask/src/kubeadm.rs for the environment it passes).
#
#   scenario.sh run          the whole scenario: network, nodes, init, join, rotation, checks
#   scenario.sh conformance  one node (kubeadm init), then the conformance suite on it
#   scenario.sh node NAME IP the inside of one node (started by `run`, never by hand)
#
# Each node is a network namespace (a veth pair joins the two), a UTS namespace (its hostname)
# a PID namespace and a private mount namespace whose /etc, /usr, /var/lib and /var/log are overlays with their
# upper layers under $WORK/<node>/overlay: kubeadm writes /etc/kubernetes and /var/lib/kubelet
# there, never on the machine. A node runs its own containerd (`xtask testbed up`) and a loop
# standing in for systemd's kubelet.service + 10-kubeadm.conf (the drop-in in deploy/ is read on
# every start, as systemd would: Environment=, EnvironmentFile=-, ExecStart=, RestartSec=10).
set -euo pipefail

: "${WORK:?}" "${KUBELET:?}" "${XTASK:?}" "${KUBEADM:?}" "${DROPIN:?}"
NET=172.31.77 # the testbeds' CNI subnets are 10.77.<slot>.0/24
CP_IP=$NET.1
WORKER_IP=$NET.2
TOKEN=abcdef.0123456789abcdef
REGISTRY=127.0.0.1:5000/k8s
# kube-controller-manager's signing duration: the worker's client certificate lives this long
# (plus the 5 min the signer backdates it by), so it is renewed during the scenario.
SIGNING_DURATION=10m

log() { printf '%(%H:%M:%S)T [kubeadm] %s\n' -1 "$*" >&2; }
fail() {
    log "FAILED: $*"
    exit 1
}

# ---------------------------------------------------------------- inside a node

# One start of kubelet.service with the drop-in, as systemd does it. Run it in the background
# (`start_kubelet_unit &`): that subshell becomes the kubelet, so its PID is the kubelet's.
start_kubelet_unit() {
    {
        exec_start=
        while IFS= read -r line; do
            case "$line" in
            Environment=*)
                assignment=${line#Environment=}
                assignment=${assignment#\"}
                assignment=${assignment%\"}
                export "${assignment%%=*}=${assignment#*=}"
                ;;
            EnvironmentFile=-*)
                file=${line#EnvironmentFile=-}
                if [ -f "$file" ]; then set -a && . "$file" && set +a; fi
                ;;
            ExecStart=?*) exec_start=${line#ExecStart=} ;;
            esac
        done <"$DROPIN"
        exec_start=${exec_start/\/usr\/bin\/kubelet/$KUBELET}
        set +u # systemd expands an unset variable to nothing
        eval "set -- $exec_start"
        echo "$(date +%T) exec $*"
        exec "$@"
    }
}

# kubelet.service: started again 10 s after it exits (Restart=always, RestartSec=10); SIGTERM
# stops the kubelet and the loop.
kubelet_service() {
    local child=
    # shellcheck disable=SC2317
    stop_service() {
        if [ -n "$child" ]; then kill -TERM "$child" 2>/dev/null || true; fi
        wait
        exit 0
    }
    trap stop_service TERM
    while :; do
        start_kubelet_unit &
        child=$!
        wait "$child" || echo "$(date +%T) kubelet exited: $?"
        child=
        sleep 10 &
        wait $! || true
    done
}

node_main() {
    local name=$1 ip=$2 dir=$WORK/$1
    hostname "$name"
    mount --make-rprivate /
    for path in /etc /usr /var/lib /var/log; do
        local layer=$dir/overlay/${path//\//_}
        mkdir -p "$layer/upper" "$layer/work"
        mount -t overlay overlay -o "lowerdir=$path,upperdir=$layer/upper,workdir=$layer/work" "$path"
    done
    # The node's cgroup root in every hierarchy (the Go kubelet refuses a --cgroup-root that
    # does not exist; a systemd slice would give it one).
    local hierarchy
    for hierarchy in /sys/fs/cgroup/*/; do mkdir -p "$hierarchy$name" 2>/dev/null || true; done
    # systemd's /etc/default/kubelet: the flags an operator adds on this node.
    echo "KUBELET_EXTRA_ARGS=\"--node-ip=$ip --cgroup-root=/$name\"" >/etc/default/kubelet
    local children=()
    # shellcheck disable=SC2317
    stop_node() {
        trap - TERM INT EXIT
        echo "$(date +%T) stopping the node (processes ${children[*]})"
        local child
        for child in $(printf '%s\n' "${children[@]}" | tac); do # the kubelet first, containerd last
            kill -TERM "$child" 2>/dev/null || true
            wait "$child" 2>/dev/null || true
        done
        exit 0
    }
    trap stop_node TERM INT EXIT
    "$XTASK" testbed up --dir "$dir/testbed" >"$dir/testbed.log" 2>&1 &
    children+=($!)
    for _ in $(seq 120); do
        grep -q "testbed ready" "$dir/testbed.log" && break
        sleep 0.5
    done
    grep -q "testbed ready" "$dir/testbed.log" || fail "$name: containerd did not start: $(tail -5 "$dir/testbed.log")"
    if [ "$name" = kadm-cp ]; then
        mkdir -p "$WORK/registry/data"
        printf 'version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: 127.0.0.1:5000\n' \
            "$WORK/registry/data" >"$WORK/registry/config.yml"
        docker-registry serve "$WORK/registry/config.yml" >"$WORK/registry/registry.log" 2>&1 &
        children+=($!)
    fi
    kubelet_service >>"$dir/kubelet.log" 2>&1 &
    children+=($!)
    touch "$dir/ready"
    while :; do sleep 3600 & wait $! || true; done
}

# ---------------------------------------------------------------- the orchestration

in_node() { # in_node NODE COMMAND...: run COMMAND in the node's namespaces
    local node=$1
    shift
    nsenter --target "$(cat "$WORK/$node/pid")" --net --mount --uts -- "$@"
}

kubectl_cp() { in_node kadm-cp kubectl --kubeconfig /etc/kubernetes/admin.conf "$@"; }

wait_for() { # wait_for SECONDS WHAT COMMAND...: poll every 2 s until COMMAND succeeds
    local seconds=$1 what=$2 started=$SECONDS
    shift 2
    until "$@" >/dev/null 2>&1; do
        ((SECONDS - started < seconds)) || return 1
        sleep 2
    done
    log "$what after $((SECONDS - started)) s"
}

cleanup() {
    local status=$?
    trap - EXIT INT TERM
    log "cleaning up (exit status $status)"
    for node in kadm-worker kadm-cp; do
        if [ -f "$WORK/$node/pid" ]; then kill -TERM "$(cat "$WORK/$node/pid")" 2>/dev/null || true; fi
    done
    for pid in "${NODE_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    ip netns del kadm-cp 2>/dev/null || true
    ip netns del kadm-worker 2>/dev/null || true
    for node in kadm-cp kadm-worker; do
        find /sys/fs/cgroup/*/"$node" -depth -type d -exec rmdir {} + 2>/dev/null || true
    done
    if [ "$status" != 0 ]; then
        log "logs kept under $WORK (kadm-*/kubelet.log, kadm-*/testbed.log, kubeadm-*.log)"
    fi
    exit "$status"
}

make_network() {
    ip netns del kadm-cp 2>/dev/null || true
    ip netns del kadm-worker 2>/dev/null || true
    ip netns add kadm-cp
    ip netns add kadm-worker
    ip link add kadm-veth0 netns kadm-cp type veth peer name kadm-veth1 netns kadm-worker
    ip -n kadm-cp addr add "$CP_IP/24" dev kadm-veth0
    ip -n kadm-worker addr add "$WORKER_IP/24" dev kadm-veth1
    local ns veth ns_veth
    for ns_veth in kadm-cp:kadm-veth0 kadm-worker:kadm-veth1; do
        ns=${ns_veth%%:*} veth=${ns_veth#*:}
        ip -n "$ns" link set lo up
        ip -n "$ns" link set "$veth" up
        # A default route, so that kubeadm's and the kubelet's address detection find the veth.
        ip -n "$ns" route add default dev "$veth"
    done
}

# One scenario at a time: both use the same namespaces, addresses and directories.
take_lock() {
    mkdir -p "$WORK"
    exec 9>"$WORK/.lock"
    flock -n 9 || fail "another kubeadm scenario is running (lock $WORK/.lock)"
}

start_node() { # start_node NAME IP
    local name=$1 ip=$2
    mkdir -p "$WORK/$name"
    rm -f "$WORK/$name/pid" "$WORK/$name/ready"
    # A PID namespace too: when the node's shell ends, the kernel ends everything it started.
    nsenter --net=/run/netns/"$name" -- unshare --uts --mount --propagation private \
        --pid --fork --mount-proc -- "$0" node "$name" "$ip" >"$WORK/$name/node.log" 2>&1 &
    local unshare=$!
    NODE_PIDS+=("$unshare")
    wait_for 90 "$name: containerd up" test -f "$WORK/$name/ready" ||
        fail "$name did not start: $(tail -5 "$WORK/$name/node.log")"
    pgrep -P "$unshare" >"$WORK/$name/pid" # the node's shell, as the machine numbers it
}

push_images() { # IMAGES: lines of "<OCI archive> <its tag> <destination reference>"
    local line tarball tag dest count=0
    while IFS= read -r line; do
        read -r tarball tag dest <<<"$line"
        in_node kadm-cp skopeo copy -q --dest-tls-verify=false \
            "oci-archive:$tarball:$tag" "docker://$dest"
        count=$((count + 1))
    done <<<"$IMAGES"
    log "$count images pushed to the registry at 127.0.0.1:5000"
}

write_init_config() {
    cat >"$WORK/kubeadm-init.yaml" <<EOF
apiVersion: kubeadm.k8s.io/v1beta2
kind: InitConfiguration
bootstrapTokens:
- token: $TOKEN
  ttl: 2h
localAPIEndpoint:
  advertiseAddress: $CP_IP
  bindPort: 6443
nodeRegistration:
  name: kadm-cp
  criSocket: unix://$WORK/kadm-cp/testbed/containerd.sock
---
apiVersion: kubeadm.k8s.io/v1beta2
kind: ClusterConfiguration
kubernetesVersion: v1.20.2
imageRepository: $REGISTRY
controllerManager:
  extraArgs:
    cluster-signing-duration: $SIGNING_DURATION
---
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
serverTLSBootstrap: true
# The bed's disk is shared with build trees: keep its fill level from tainting the node with
# disk-pressure (upstream's defaults are 10 % and 15 % free).
evictionHard:
  memory.available: 100Mi
  nodefs.available: 2%
  imagefs.available: 2%
EOF
}

node_ready() { # node_ready NODE
    [ "$(kubectl_cp get node "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]
}

mirror_pods_running() {
    local pod
    for pod in etcd kube-apiserver kube-controller-manager kube-scheduler; do
        [ "$(kubectl_cp -n kube-system get pod "$pod-kadm-cp" -o jsonpath='{.status.phase}')" = Running ] || return 1
    done
}

approve_serving_csrs() { # approves pending kubelet-serving CSRs; succeeds once NODE's is approved
    local node=$1 csr
    for csr in $(kubectl_cp get csr -o jsonpath='{range .items[?(@.spec.signerName=="kubernetes.io/kubelet-serving")]}{.metadata.name}{" "}{end}'); do
        if [ -z "$(kubectl_cp get csr "$csr" -o jsonpath='{.status.conditions}')" ]; then
            kubectl_cp certificate approve "$csr" >/dev/null
        fi
    done
    kubectl_cp get csr -o jsonpath='{range .items[?(@.spec.username=="system:node:'"$node"'")]}{.spec.signerName}{" "}{.status.certificate}{"\n"}{end}' |
        grep -q '^kubernetes.io/kubelet-serving [A-Za-z0-9]'
}

pod_running() { [ "$(kubectl_cp get pod on-worker -o jsonpath='{.status.phase}')" = Running ]; }

pod_logs_arrive() { kubectl_cp logs on-worker | grep -q 'hello from kadm-worker'; }

client_cert() { # the worker's current client certificate, as seen on the worker
    in_node kadm-worker openssl x509 -noout "$@" -in /var/lib/kubelet/pki/kubelet-client-current.pem
}

date_epoch() { date -d "$1" +%s; }

lease_age() { # seconds since the worker last renewed its Lease
    local renew
    renew=$(kubectl_cp -n kube-node-lease get lease kadm-worker -o jsonpath='{.spec.renewTime}')
    echo $(($(date +%s) - $(date_epoch "$renew")))
}

# The control-plane node up: images in its registry, `kubeadm init`, the Node Ready and the four
# mirror pods Running.
init_control_plane() {
    push_images
    write_init_config
    log "kubeadm init (log: $WORK/kubeadm-init.log)"
    local t_init=$SECONDS
    in_node kadm-cp "$KUBEADM" init --config "$WORK/kubeadm-init.yaml" \
        --skip-phases=preflight,addon/coredns,addon/kube-proxy >"$WORK/kubeadm-init.log" 2>&1 ||
        fail "kubeadm init: $(tail -20 "$WORK/kubeadm-init.log")"
    log "kubeadm init succeeded in $((SECONDS - t_init)) s"
    wait_for 120 "kadm-cp Ready" node_ready kadm-cp || fail "kadm-cp is not Ready"
    wait_for 180 "the four control-plane mirror pods Running" mirror_pods_running ||
        fail "mirror pods: $(kubectl_cp -n kube-system get pods -o wide 2>&1)"
}

run_main() {
    NODE_PIDS=()
    take_lock
    trap cleanup EXIT INT TERM
    local t0=$SECONDS
    rm -rf "$WORK/kadm-cp" "$WORK/kadm-worker" "$WORK/registry"
    mkdir -p "$WORK"
    make_network
    start_node kadm-cp "$CP_IP"
    start_node kadm-worker "$WORKER_IP"
    init_control_plane
    grep -q 'kubelet-finalize' "$WORK/kubeadm-init.log" ||
        fail "kubeadm did not point kubelet.conf at a rotatable certificate (no kubelet-client-current.pem)"

    # ---- kubeadm join of kadm-worker
    log "kubeadm join (log: $WORK/kubeadm-join.log)"
    local t_join=$SECONDS
    in_node kadm-worker "$KUBEADM" join "$CP_IP:6443" --token "$TOKEN" \
        --discovery-token-unsafe-skip-ca-verification --skip-phases=preflight \
        --node-name kadm-worker --cri-socket "unix://$WORK/kadm-worker/testbed/containerd.sock" \
        >"$WORK/kubeadm-join.log" 2>&1 || fail "kubeadm join: $(tail -20 "$WORK/kubeadm-join.log")"
    log "kubeadm join succeeded in $((SECONDS - t_join)) s"
    in_node kadm-worker test -L /var/lib/kubelet/pki/kubelet-client-current.pem ||
        fail "no kubelet-client-current.pem link on kadm-worker"
    kubectl_cp get csr -o jsonpath='{range .items[*]}{.spec.signerName} {.spec.username} {.status.conditions[0].type}{"\n"}{end}' |
        grep -q '^kubernetes.io/kube-apiserver-client-kubelet system:bootstrap:.* Approved' ||
        fail "the worker's bootstrap CSR was not approved: $(kubectl_cp get csr 2>&1)"
    wait_for 120 "kadm-worker Ready" node_ready kadm-worker || fail "kadm-worker is not Ready"

    # ---- serving certificates, a pod on the worker, logs and exec through the API server
    wait_for 120 "kadm-worker's serving certificate issued" approve_serving_csrs kadm-worker ||
        fail "no serving certificate for kadm-worker: $(kubectl_cp get csr 2>&1)"
    kubectl_cp apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: on-worker, namespace: default}
spec:
  nodeName: kadm-worker
  containers:
  - name: main
    image: docker.io/library/busybox:1.36
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "echo hello from kadm-worker; exec sleep 86400"]
EOF
    wait_for 120 "pod on-worker Running" pod_running ||
        fail "pod on-worker: $(kubectl_cp describe pod on-worker 2>&1 | tail -20)"
    wait_for 60 "kubectl logs through kadm-worker's serving certificate" pod_logs_arrive ||
        fail "kubectl logs: $(kubectl_cp logs on-worker 2>&1)"
    [ "$(kubectl_cp exec on-worker -- hostname)" = on-worker ] ||
        fail "kubectl exec: $(kubectl_cp exec on-worker -- hostname 2>&1)"
    log "kubectl exec on-worker -- hostname: on-worker"

    # ---- the worker's client certificate is renewed, and outlives the first one
    local serial expiry started_renew=$SECONDS
    serial=$(client_cert -serial)
    expiry=$(client_cert -enddate | cut -d= -f2)
    log "worker client certificate $serial, $(client_cert -startdate | cut -d= -f2) .. $expiry"
    local ready_checks=0 not_ready=0
    until [ "$(client_cert -serial)" != "$serial" ]; do
        (($(date +%s) < $(date_epoch "$expiry"))) || fail "the client certificate expired without renewal"
        node_ready kadm-worker || not_ready=$((not_ready + 1))
        ready_checks=$((ready_checks + 1))
        sleep 10
    done
    log "client certificate renewed after $((SECONDS - started_renew)) s: $(client_cert -serial), until $(client_cert -enddate | cut -d= -f2)"
    while (($(date +%s) < $(date_epoch "$expiry") + 60)); do
        node_ready kadm-worker || not_ready=$((not_ready + 1))
        ready_checks=$((ready_checks + 1))
        sleep 10
    done
    local age
    age=$(lease_age)
    log "a minute after the first certificate expired: Lease renewed $age s ago; Ready in $((ready_checks - not_ready))/$ready_checks checks"
    ((age <= 40)) || fail "the worker's Lease is $age s old after its first certificate expired"
    ((not_ready == 0)) || fail "kadm-worker was NotReady in $not_ready of $ready_checks checks"
    node_ready kadm-worker || fail "kadm-worker is not Ready after the rotation"
    local restarts
    restarts=$(kubectl_cp get pod on-worker -o jsonpath='{.status.containerStatuses[0].restartCount}')
    [ "$restarts" = 0 ] || fail "the pod's container restarted $restarts times"
    log "PASSED in $((SECONDS - t0)) s"
}


# The conformance suite on a one-node cluster: kubeadm init as above, the control-plane taint
# lifted so that the suite's pods run on the node, then ginkgo with e2e.test inside the node's
# namespaces. Needs E2E_TEST, GINKGO, FOCUS, SKIP, NODES; the JUnit reports go to $WORK/report.
conformance_main() {
    : "${E2E_TEST:?}" "${GINKGO:?}" "${FOCUS:?}" "${SKIP:?}" "${NODES:?}"
    # Certificates that outlive the run: with 10 min ones the Go kubelet's serving certificate
    # expires while its renewal waits for an approval, and exec specs fail with a TLS error.
    SIGNING_DURATION=8760h
    NODE_PIDS=()
    take_lock
    trap cleanup EXIT INT TERM
    rm -rf "$WORK/kadm-cp" "$WORK/kadm-worker" "$WORK/registry" "$WORK/report"
    mkdir -p "$WORK/report"
    make_network
    start_node kadm-cp "$CP_IP"
    init_control_plane
    kubectl_cp taint nodes kadm-cp node-role.kubernetes.io/master- >/dev/null
    # The Go kubelet serves nothing on 10250 until its serving certificate is issued.
    wait_for 120 "kadm-cp's serving certificate issued" approve_serving_csrs kadm-cp ||
        fail "no serving certificate for kadm-cp: $(kubectl_cp get csr 2>&1)"
    printf '%s\n' "dockerLibraryRegistry: 127.0.0.1:5000/library" \
        "e2eRegistry: 127.0.0.1:5000/kubernetes-e2e-test-images" \
        "promoterE2eRegistry: 127.0.0.1:5000/e2e-test-images" \
        "gcRegistry: 127.0.0.1:5000/k8s" >"$WORK/repo-list.yaml"
    log "ginkgo -nodes=$NODES -focus='$FOCUS' -skip='$SKIP' (log: $WORK/e2e.log)"
    local t_suite=$SECONDS
    in_node kadm-cp env KUBE_TEST_REPO_LIST="$WORK/repo-list.yaml" "$GINKGO" -nodes="$NODES" \
        -noColor -focus="$FOCUS" -skip="$SKIP" "$E2E_TEST" -- --provider=local \
        --kubeconfig=/etc/kubernetes/admin.conf --minStartupPods=0 --allowed-not-ready-nodes=0 \
        --report-dir="$WORK/report" >"$WORK/e2e.log" 2>&1 || true
    log "the suite ran in $((SECONDS - t_suite)) s: $(grep -E '^(Ran [0-9]+ of|FAIL!|SUCCESS!)' "$WORK/e2e.log" | tr '\n' ' ')"
}

case "${1:-}" in
run) run_main ;;
conformance) conformance_main ;;
node) node_main "$2" "$3" ;;
*)
    echo "usage: $0 run | conformance | node NAME IP" >&2
    exit 2
    ;;
esac

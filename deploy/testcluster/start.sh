#!/bin/bash
# start one component in background, record pid. usage: start.sh NAME
B=/tmp/k8s-bin; R=/tmp/k8s-run; P=$R/pki; export PATH=$B:$PATH
case $1 in
apiserver) cmd="$B/kube-apiserver --etcd-servers=http://127.0.0.1:23790 --secure-port=16443 --bind-address=0.0.0.0 --advertise-address=192.0.2.2 --tls-cert-file=$P/apiserver.crt --tls-private-key-file=$P/apiserver.key --client-ca-file=$P/ca.crt --service-account-key-file=$P/sa.pub --service-account-signing-key-file=$P/sa.key --service-account-issuer=https://kubernetes.default.svc --service-cluster-ip-range=10.96.0.0/16 --authorization-mode=Node,RBAC --kubelet-client-certificate=$P/kubelet-client.crt --kubelet-client-key=$P/kubelet-client.key --kubelet-certificate-authority=$P/ca.crt --allow-privileged=true" ;;
controller-manager) cmd="$B/kube-controller-manager --kubeconfig=$R/admin.kubeconfig --authentication-kubeconfig=$R/admin.kubeconfig --authorization-kubeconfig=$R/admin.kubeconfig --service-account-private-key-file=$P/sa.key --root-ca-file=$P/ca.crt --cluster-signing-cert-file=$P/ca.crt --cluster-signing-key-file=$P/ca.key --use-service-account-credentials=true --allocate-node-cidrs=true --cluster-cidr=10.244.0.0/16 --node-cidr-mask-size=24 --service-cluster-ip-range=10.96.0.0/16 --secure-port=20257 --bind-address=127.0.0.1 --leader-elect=false" ;;
scheduler) cmd="$B/kube-scheduler --kubeconfig=$R/admin.kubeconfig --authentication-kubeconfig=$R/admin.kubeconfig --authorization-kubeconfig=$R/admin.kubeconfig --secure-port=20259 --bind-address=127.0.0.1 --leader-elect=false" ;;
kubelet) cmd="$B/kubelet --config=$R/kubelet.yaml --kubeconfig=$R/kubelet.kubeconfig --root-dir=$R/kubelet --hostname-override=vm --node-ip=192.0.2.2 --cert-dir=$R/kubelet-pki" ;;
proxy) cmd="$B/kube-proxy --config=$R/kube-proxy.yaml" ;;
router) cmd="$B/kube-router --kubeconfig=$R/admin.kubeconfig --run-firewall=true --run-router=false --run-service-proxy=false --enable-cni=false --hostname-override=vm --health-port=20244 --metrics-port=0 --v=1" ;;
esac
nohup $cmd > $R/$1.log 2>&1 &
echo $! > $R/$1.pid

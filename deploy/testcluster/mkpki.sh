#!/bin/bash
set -e
cd /tmp/k8s-run/pki
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 -subj "/CN=corral-test-ca" 2>/dev/null
cert() { # name CN O sans
  openssl req -newkey rsa:2048 -nodes -keyout $1.key -out $1.csr -subj "/CN=$2${3:+/O=$3}" 2>/dev/null
  if [ -n "$4" ]; then printf "subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n" "$4" > $1.ext; else printf "extendedKeyUsage=clientAuth\n" > $1.ext; fi
  openssl x509 -req -in $1.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out $1.crt -days 3650 -extfile $1.ext 2>/dev/null
}
cert apiserver kube-apiserver "" "IP:127.0.0.1,IP:192.0.2.2,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
cert admin admin system:masters
cert kubelet-client kube-apiserver-kubelet-client system:masters
cert node system:node:vm system:nodes
cert kubelet-serving vm "" "IP:127.0.0.1,IP:192.0.2.2,DNS:vm,DNS:localhost"
openssl genrsa -out sa.key 2048 2>/dev/null; openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
kc() { # name cert
cat > ../$1.kubeconfig <<EOK
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:16443", certificate-authority: /tmp/k8s-run/pki/ca.crt}}]
users: [{name: u, user: {client-certificate: /tmp/k8s-run/pki/$2.crt, client-key: /tmp/k8s-run/pki/$2.key}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
EOK
}
kc admin admin; kc kubelet node

package kubetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller"
)

// StorageClass is the cluster's class of persistent volumes: directories of the node, provisioned when a pod that
// claims one is scheduled and removed when its claim is deleted (reclaim policy Delete), as k3s's
// local-path-provisioner does. The provisioner is built on the SIG's external-provisioner library and runs in the
// process that started the cluster; the claims, the binding and the mounts are the cluster's own. A local
// volume's size is not enforced (no directory backend does): the claim's request is its capacity.
const StorageClass = "corral-local"

// provisionerName is the StorageClass's provisioner.
const provisionerName = "corral.dev/kubetest-local"

// startStorage creates StorageClass and starts its provisioner until ctx ends.
func (c *Cluster) startStorage(ctx context.Context) error {
	root := c.layout.path("volumes")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	del, wait := corev1.PersistentVolumeReclaimDelete, storagev1.VolumeBindingWaitForFirstConsumer
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: StorageClass}, Provisioner: provisionerName,
		ReclaimPolicy: &del, VolumeBindingMode: &wait}
	if _, err := c.Client.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("storage class: %w", err)
	}
	// Its log (an event per claim) is not the tests' output; the claims' events are the cluster's.
	ctx = klog.NewContext(ctx, logr.Discard())
	pc := controller.NewProvisionController(ctx, c.Client, provisionerName, &hostDirs{root: root},
		controller.LeaderElection(false))
	go pc.Run(ctx)
	return nil
}

// hostDirs provisions a volume as a directory under root that any uid can write (the pods' users are not
// root's), reached on the node it was made for (the node's name is its hostname label: the kubelet's default).
type hostDirs struct{ root string }

func (h *hostDirs) Provision(_ context.Context, o controller.ProvisionOptions) (*corev1.PersistentVolume, controller.ProvisioningState, error) {
	if o.SelectedNodeName == "" {
		return nil, controller.ProvisioningFinished, errors.New("no node selected: the class binds when a pod is scheduled")
	}
	dir := filepath.Join(h.root, o.PVName)
	if err := os.Mkdir(dir, 0o777); err != nil && !os.IsExist(err) {
		return nil, controller.ProvisioningFinished, err
	}
	if err := os.Chmod(dir, 0o777); err != nil { // past the umask
		return nil, controller.ProvisioningFinished, err
	}
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: o.PVName},
		Spec: corev1.PersistentVolumeSpec{
			PersistentVolumeReclaimPolicy: *o.StorageClass.ReclaimPolicy,
			AccessModes:                   o.PVC.Spec.AccessModes,
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: o.PVC.Spec.Resources.Requests[corev1.ResourceStorage]},
			PersistentVolumeSource:        corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: dir}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn,
					Values: []string{o.SelectedNodeName}}},
			}}}},
		},
	}, controller.ProvisioningFinished, nil
}

func (h *hostDirs) Delete(_ context.Context, pv *corev1.PersistentVolume) error {
	if pv.Spec.Local == nil || !strings.HasPrefix(pv.Spec.Local.Path, h.root+"/") {
		return &controller.IgnoredError{Reason: "not a volume of this provisioner"}
	}
	return os.RemoveAll(pv.Spec.Local.Path)
}

package kubernetes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/corralhq/corral/internal/sandbox"
)

// With Config.WorkspaceClass, a session's workspace is a PersistentVolumeClaim of its own that its pods mount in
// turn: a pod that dies, is deleted or is reaped leaves the workspace to the next, whichever server starts it.
// The claim is not owned by a pod or a server: RemoveWorkspace deletes it when the session is gone.

var _ sandbox.WorkspaceKeeper = (*Provider)(nil)

// claimName is the name of the session's workspace claim: session ids are not DNS labels.
func claimName(sessionID string) string {
	sum := sha256.Sum256([]byte(sessionID))
	return "corral-ws-" + hex.EncodeToString(sum[:10])
}

// checkClass refuses a workspace class the cluster does not have: each session's pod would otherwise wait out its
// start timeout, unschedulable on a claim that never binds. A StorageClass is cluster-scoped: without the right
// to read it (the chart grants get on that one class by name), the check is skipped, and the log says so.
func (p *Provider) checkClass(ctx context.Context) error {
	_, err := p.cs.StorageV1().StorageClasses().Get(ctx, p.cfg.WorkspaceClass, metav1.GetOptions{})
	switch {
	case err == nil:
		return nil
	case apierrors.IsNotFound(err):
		return fmt.Errorf("kubernetes: workspace class %q: the cluster has no such StorageClass", p.cfg.WorkspaceClass)
	case apierrors.IsForbidden(err):
		p.cfg.Logger.Warn("kubernetes: the workspace class is not checked: no right to read it", "class", p.cfg.WorkspaceClass, "err", err)
		return nil
	default:
		return fmt.Errorf("kubernetes: workspace class %q: %w", p.cfg.WorkspaceClass, err)
	}
}

// ensureClaim creates the session's workspace claim unless it exists, and returns its name.
func (p *Provider) ensureClaim(ctx context.Context, sessionID string) (string, error) {
	name := claimName(sessionID)
	labels := map[string]string{LabelManaged: "corral", LabelWorkspace: name}
	if validLabel(sessionID) {
		labels[LabelSession] = sessionID
	}
	class := p.cfg.WorkspaceClass
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: map[string]string{AnnotationSession: sessionID}},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: &class,
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: *resource.NewQuantity(p.cfg.WorkspaceBytes, resource.BinarySI)}},
		},
	}
	_, err := p.cs.CoreV1().PersistentVolumeClaims(p.cfg.Namespace).Create(ctx, pvc, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("create workspace claim: %w", err)
	}
	return name, nil
}

// Workspaces lists the sessions that have a workspace claim in the namespace, whichever server made it, except
// claims already being deleted (a claim a pod still uses stays until the pod goes). Without
// Config.WorkspaceClass there are none to keep.
func (p *Provider) Workspaces(ctx context.Context) ([]string, error) {
	if p.cfg.WorkspaceClass == "" {
		return nil, nil
	}
	list, err := p.cs.CoreV1().PersistentVolumeClaims(p.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelManaged + "=corral," + LabelWorkspace})
	if err != nil {
		return nil, fmt.Errorf("kubernetes: list workspace claims: %w", err)
	}
	var ids []string
	for _, c := range list.Items {
		if id := c.Annotations[AnnotationSession]; id != "" && claimName(id) == c.Name && c.DeletionTimestamp == nil {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// RemoveWorkspace deletes the session's workspace claim (its volume goes as the class's reclaim policy says,
// once no pod uses it). Idempotent.
func (p *Provider) RemoveWorkspace(ctx context.Context, sessionID string) error {
	err := p.cs.CoreV1().PersistentVolumeClaims(p.cfg.Namespace).Delete(ctx, claimName(sessionID), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("kubernetes: delete workspace claim: %w", err)
	}
	return nil
}

package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	netv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// denyByDefault makes the namespace's default-deny policy: a pod that no other policy selects reaches nothing
// and is reached by nothing.
func (p *Provider) denyByDefault(ctx context.Context) error {
	np := &netv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "corral-default-deny", Labels: map[string]string{LabelManaged: "corral"}},
		Spec: netv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{LabelManaged: "corral"}},
			PolicyTypes: []netv1.PolicyType{netv1.PolicyTypeIngress, netv1.PolicyTypeEgress},
		},
	}
	_, err := p.cs.NetworkingV1().NetworkPolicies(p.cfg.Namespace).Create(ctx, np, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("kubernetes: default-deny network policy: %w", err)
	}
	return nil
}

// deleteWhere deletes the sandbox pods, policies and config maps the label selector picks.
func (p *Provider) deleteWhere(ctx context.Context, selector string) error {
	sel := LabelManaged + "=corral," + LabelSandbox + "," + selector
	opts := metav1.ListOptions{LabelSelector: sel}
	now := int64(0)
	del := metav1.DeleteOptions{GracePeriodSeconds: &now}
	ns := p.cfg.Namespace
	return errors.Join(
		p.cs.CoreV1().Pods(ns).DeleteCollection(ctx, del, opts),
		p.cs.NetworkingV1().NetworkPolicies(ns).DeleteCollection(ctx, del, opts),
		p.cs.CoreV1().ConfigMaps(ns).DeleteCollection(ctx, del, opts))
}

// keep extends the expiry of this provider's live pods and deletes the expired pods of any owner, every third
// of the TTL.
func (p *Provider) keep() {
	defer close(p.done)
	t := time.NewTicker(p.cfg.TTL / 3)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), p.cfg.TTL/3)
		p.mu.Lock()
		live := make([]*Sandbox, 0, len(p.live))
		for _, sb := range p.live {
			live = append(live, sb)
		}
		p.mu.Unlock()
		for _, sb := range live {
			if err := p.extend(ctx, sb.name); err != nil && !apierrors.IsNotFound(err) {
				p.cfg.Logger.Warn("kubernetes: extend a sandbox pod's expiry", "pod", sb.name, "err", err)
			}
		}
		if err := p.reapExpired(ctx); err != nil {
			p.cfg.Logger.Warn("kubernetes: reap expired sandbox pods", "err", err)
		}
		cancel()
	}
}

func (p *Provider) expiry() string { return time.Now().Add(p.cfg.TTL).UTC().Format(time.RFC3339) }

func (p *Provider) extend(ctx context.Context, pod string) error {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{AnnotationExpires: p.expiry()}}})
	_, err := p.cs.CoreV1().Pods(p.cfg.Namespace).Patch(ctx, pod, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// reapExpired deletes the sandboxes (pod, policy and config map) of any owner whose pod's expiry has passed: a
// server that died and never came back under its owner name.
func (p *Provider) reapExpired(ctx context.Context) error {
	pods, err := p.cs.CoreV1().Pods(p.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelManaged + "=corral," + LabelSandbox})
	if err != nil {
		return err
	}
	var errs []error
	for _, pod := range pods.Items {
		exp, err := time.Parse(time.RFC3339, pod.Annotations[AnnotationExpires])
		if err == nil && time.Now().Before(exp) {
			continue
		}
		p.cfg.Logger.Info("kubernetes: deleting an expired sandbox pod", "pod", pod.Name, "owner", pod.Labels[LabelOwner])
		errs = append(errs, p.deleteWhere(ctx, LabelSandbox+"="+pod.Labels[LabelSandbox]))
	}
	return errors.Join(errs...)
}

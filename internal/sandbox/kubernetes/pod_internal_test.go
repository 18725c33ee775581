package kubernetes

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestPodEndedReasons: a pod that ended before it served is an error that says why: the node's reason when the
// node ended it (here an eviction, with the sandbox container still waiting), and each container's state.
func TestPodEndedReasons(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "corral-1"},
		Status: corev1.PodStatus{
			Phase: corev1.PodFailed, Reason: "Evicted", Message: "The node was low on resource: memory.",
			InitContainerStatuses: []corev1.ContainerStatus{{Name: "agent", State: corev1.ContainerState{
				Terminated: &corev1.ContainerStateTerminated{Reason: "Completed", ExitCode: 0}}}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "sandbox", State: corev1.ContainerState{
				Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}},
		},
	}
	_, _, err := podState(pod)
	if err == nil {
		t.Fatal("a failed pod is not an error")
	}
	for _, want := range []string{"corral-1 ended before it served (Failed)", "Evicted The node was low on resource: memory.",
		"agent: Completed (exit 0)", "sandbox: waiting: ContainerCreating"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v: want %q in it", err, want)
		}
	}
}

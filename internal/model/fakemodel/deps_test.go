package fakemodel_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestNoTestKit: the package ships in the corral binary (corral bench), so it must not link the test kit.
func TestNoTestKit(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, "net/http") {
		t.Fatalf("go list -deps gave no net/http; the check below would prove nothing: %v", deps)
	}
	for _, bad := range []string{"testing", "net/http/httptest"} {
		if slices.Contains(deps, bad) {
			t.Errorf("fakemodel depends on %s", bad)
		}
	}
}

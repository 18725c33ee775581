package sandbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/sandbox"
)

func TestUnavailableSaysWhy(t *testing.T) {
	t.Parallel()
	const reason = "bubblewrap is not installed: apt-get install bubblewrap"
	h := sandbox.Unavailable(nil, reason)
	res, err := h.Execute(context.Background(), &sandbox.Call{Recipe: sandbox.Recipe{SessionID: "sesn_x"}, Name: "bash"})
	if !errors.Is(err, sandbox.ErrUnavailable) {
		t.Errorf("err = %v, want ErrUnavailable", err)
	}
	if !res.IsError || len(res.Content) != 1 || !strings.Contains(res.Content[0].Text, reason) {
		t.Errorf("result = %+v, want an error result holding %q", res, reason)
	}
	if _, ok := h.(sandbox.Provisioner); ok {
		t.Error("unavailable hands claim to provision sandboxes")
	}
}

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/sandbox"
)

// HandsResult is one backend's provisioning and execution latency.
type HandsResult struct {
	Backend string
	// Provision is Provider.Provision until it returns; Ready adds the first call answered (bash "true"), i.e.
	// what a coupled design waits before its first model call; Exec is a bash "true" round trip in a ready
	// sandbox.
	Provision, Ready, Exec Dist
}

// RunHands provisions n sandboxes one after the other, runs calls bash "true" calls in each, and closes it.
func RunHands(ctx context.Context, prov sandbox.Provider, workRoot string, n, calls int) (HandsResult, error) {
	res := HandsResult{Backend: prov.Name()}
	var provs, readies, execs []time.Duration
	input := json.RawMessage(`{"command":"true"}`)
	for i := range n {
		dir := filepath.Join(workRoot, fmt.Sprintf("hands-%s-%d", prov.Name(), i))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return res, err
		}
		r := &sandbox.Recipe{SessionID: fmt.Sprintf("sesn_bench%d", i), Environment: apitype.EnvConfig{Type: apitype.EnvironmentCloud}}
		t0 := time.Now()
		sb, err := prov.Provision(ctx, r, sandbox.HostDirs{Workspace: dir})
		if err != nil {
			return res, fmt.Errorf("provision %s: %w", prov.Name(), err)
		}
		provs = append(provs, time.Since(t0))
		out, err := sb.Execute(ctx, "", "bash", input)
		if err == nil && out.IsError {
			err = fmt.Errorf("bash true failed: %+v", out.Content)
		}
		if err != nil {
			_ = sb.Close()
			return res, fmt.Errorf("%s: first call: %w", prov.Name(), err)
		}
		readies = append(readies, time.Since(t0))
		for range calls {
			t := time.Now()
			if _, err := sb.Execute(ctx, "", "bash", input); err != nil {
				_ = sb.Close()
				return res, fmt.Errorf("%s: call: %w", prov.Name(), err)
			}
			execs = append(execs, time.Since(t))
		}
		if err := sb.Close(); err != nil {
			return res, fmt.Errorf("%s: close: %w", prov.Name(), err)
		}
	}
	res.Provision, res.Ready, res.Exec = Summarize(provs), Summarize(readies), Summarize(execs)
	return res, nil
}

package sandbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/corralhq/corral/internal/sandbox"
)

// A Pool provisions a session's sandbox on its first tool call and reuses it after. Any Provider works; a real
// server passes bwrap.New(bwrap.Config{AgentPath: ...}).
func ExamplePool() {
	root, _ := os.MkdirTemp("", "workspaces-")
	defer os.RemoveAll(root)
	pool, err := sandbox.NewPool(sandbox.PoolConfig{Provider: &fakeProvider{}, WorkspaceRoot: root})
	if err != nil {
		panic(err)
	}
	defer pool.Stop()

	call := &sandbox.Call{
		Recipe: sandbox.Recipe{SessionID: "sesn_1"},
		Name:   "bash",
		Input:  json.RawMessage(`{"command":"echo hi"}`),
		OnProvision: func(r sandbox.ProvisionReport) {
			fmt.Printf("provisioning (done=%v)\n", r.Done)
		},
	}
	for range 2 {
		res, err := pool.Execute(context.Background(), call)
		if err != nil {
			panic(err)
		}
		fmt.Println(res.Content[0].Text)
	}
	// Output:
	// provisioning (done=false)
	// provisioning (done=true)
	// bash {"command":"echo hi"}
	// bash {"command":"echo hi"}
}

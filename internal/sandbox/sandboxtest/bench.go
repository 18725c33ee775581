package sandboxtest

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/sandbox"
)

// Bench measures a backend: cold provisioning (Provision's return, and until the agent has answered a first
// call) and the round trips of the bash builtin `true` and of /bin/true in a provisioned sandbox, reporting p50
// and p95 in milliseconds. It never asserts on timings.
func Bench(b *testing.B, newProvider func(testing.TB) sandbox.Provider) {
	b.Run("Provision", func(b *testing.B) {
		prov := newProvider(b)
		root := WorkspaceRoot(b)
		trueInput := json.RawMessage(`{"command":"true"}`)
		var ready, started []time.Duration
		for i := 0; b.Loop(); i++ {
			r := sandbox.Recipe{SessionID: "bench", WorkspaceDir: filepath.Join(root, strconv.Itoa(i%4))}
			t0 := time.Now()
			sb, err := prov.Provision(context.Background(), &r)
			if err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			if res, err := sb.Execute(context.Background(), "bash", trueInput); err != nil || res.IsError {
				b.Fatalf("first call: %v %+v", err, res)
			}
			t2 := time.Now()
			b.StopTimer()
			started = append(started, t1.Sub(t0))
			ready = append(ready, t2.Sub(t0))
			if err := sb.Close(); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		report(b, "provision", started)
		report(b, "ready", ready)
	})
	for _, tc := range []struct{ name, command string }{
		{"True", "true"},         // a shell builtin: the agent's round trip
		{"BinTrue", "/bin/true"}, // fork and exec in the sandbox
	} {
		b.Run(tc.name, func(b *testing.B) {
			prov := newProvider(b)
			r := sandbox.Recipe{SessionID: "bench", WorkspaceDir: filepath.Join(WorkspaceRoot(b), "ws")}
			sb, err := prov.Provision(context.Background(), &r)
			if err != nil {
				b.Fatal(err)
			}
			defer sb.Close()
			in, _ := json.Marshal(map[string]string{"command": tc.command})
			for range 5 { // warm up the shell
				if _, err := sb.Execute(context.Background(), "bash", in); err != nil {
					b.Fatal(err)
				}
			}
			var durs []time.Duration
			for b.Loop() {
				t0 := time.Now()
				res, err := sb.Execute(context.Background(), "bash", in)
				durs = append(durs, time.Since(t0))
				if err != nil || res.IsError {
					b.Fatalf("%s: %v %+v", tc.command, err, res)
				}
			}
			report(b, strings.ToLower(tc.name), durs)
		})
	}
}

// report adds the p50 and p95 of durs, in milliseconds, to the benchmark's output.
func report(b *testing.B, name string, durs []time.Duration) {
	if len(durs) == 0 {
		return
	}
	s := slices.Clone(durs)
	slices.Sort(s)
	at := func(q float64) float64 {
		return float64(s[min(len(s)-1, int(q*float64(len(s))))].Microseconds()) / 1000
	}
	b.ReportMetric(at(0.50), name+"-p50-ms")
	b.ReportMetric(at(0.95), name+"-p95-ms")
}

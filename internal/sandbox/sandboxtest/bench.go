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
			r := sandbox.Recipe{SessionID: "bench"}
			t0 := time.Now()
			sb, err := prov.Provision(context.Background(), &r, sandbox.HostDirs{Workspace: filepath.Join(root, strconv.Itoa(i%4))})
			if err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			if res, err := sb.Execute(context.Background(), "", "bash", trueInput); err != nil || res.IsError {
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
			r := sandbox.Recipe{SessionID: "bench"}
			sb, err := prov.Provision(context.Background(), &r, sandbox.HostDirs{Workspace: filepath.Join(WorkspaceRoot(b), "ws")})
			if err != nil {
				b.Fatal(err)
			}
			defer sb.Close()
			in, _ := json.Marshal(map[string]string{"command": tc.command})
			for range 5 { // warm up the shell
				if _, err := sb.Execute(context.Background(), "", "bash", in); err != nil {
					b.Fatal(err)
				}
			}
			var durs []time.Duration
			for b.Loop() {
				t0 := time.Now()
				res, err := sb.Execute(context.Background(), "", "bash", in)
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

// BenchImage measures what running on an image (sandbox.HostDirs.RootFS) adds to provisioning: each iteration
// provisions a sandbox on the host's /usr and one on the image at rootfs, in turn (so that both see the same
// load), each until Provision returns and until a first `bash true` is answered. The provider has staged the
// image before the first iteration (one provision first, reported alone: it stages the image), as a server has
// once its first sandbox on an image started. It reports p50 and p95 of both, in milliseconds.
func BenchImage(b *testing.B, newProvider func(testing.TB) sandbox.Provider, rootfs string) {
	prov := newProvider(b)
	root := WorkspaceRoot(b)
	trueInput := json.RawMessage(`{"command":"true"}`)
	var started, ready [2][]time.Duration
	one := func(i, kind int) {
		r := sandbox.Recipe{SessionID: "bench"}
		dirs := sandbox.HostDirs{Workspace: filepath.Join(root, strconv.Itoa(i%4))}
		if kind == 1 {
			dirs.RootFS = rootfs
		}
		t0 := time.Now()
		sb, err := prov.Provision(context.Background(), &r, dirs)
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if res, err := sb.Execute(context.Background(), "", "bash", trueInput); err != nil || res.IsError {
			b.Fatalf("first call: %v %+v", err, res)
		}
		t2 := time.Now()
		started[kind] = append(started[kind], t1.Sub(t0))
		ready[kind] = append(ready[kind], t2.Sub(t0))
		if err := sb.Close(); err != nil {
			b.Fatal(err)
		}
	}
	one(0, 1) // stages the image
	first := started[1][0]
	started[1], ready[1] = nil, nil
	for i := 0; b.Loop(); i++ {
		one(i, i%2)
		one(i, 1-i%2)
	}
	report(b, "provision", started[0])
	report(b, "ready", ready[0])
	report(b, "image-provision", started[1])
	report(b, "image-ready", ready[1])
	b.ReportMetric(float64(first.Microseconds())/1000, "first-image-provision-ms")
}

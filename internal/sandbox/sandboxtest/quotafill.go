package sandboxtest

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/volume"
)

// BenchQuotaFill replays issue 14's session that filled the filesystem of the database: bash writes 2.5 GB
// into /workspace, deletes it, then creates 300,000 files, on a data directory that is an ext4 filesystem of
// 2 GiB of its own, without quotas (off) and with a 1 GiB, 65,536-inode quota and a 512 MiB reserve (on); and
// with the server's default quota on the host's own filesystem (defaults). It reports how much landed, what
// the data filesystem has left, and whether the store could still write a file there (1 = yes). It runs once
// whatever b.N (minutes: it writes gigabytes).
func BenchQuotaFill(b *testing.B, newProvider func(testing.TB) sandbox.Provider) {
	cases := []struct {
		name      string
		dataFS    bool
		size      int64
		inodes    int64
		reserve   int64
		noVolumes bool
	}{
		{name: "off", dataFS: true, noVolumes: true},
		{name: "on", dataFS: true, size: 1 << 30, inodes: 65536, reserve: 512 << 20},
		{name: "defaults"},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			prov := newProvider(b)
			Require(b, prov.Name(), volume.Available(""))
			base := WorkspaceRoot(b)
			data := filepath.Join(base, "data")
			if err := os.Mkdir(data, 0o711); err != nil {
				b.Fatal(err)
			}
			if c.dataFS {
				img := filepath.Join(base, "data.img")
				for _, args := range [][]string{{"truncate", "-s", "2G", img}, {"mkfs.ext4", "-q", "-F", img}, {"mount", "-o", "loop", img, data}} {
					if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
						b.Fatalf("%v: %v: %s", args, err, out)
					}
				}
				b.Cleanup(func() { _ = syscall.Unmount(data, syscall.MNT_DETACH) })
				if err := os.Chmod(data, 0o711); err != nil {
					b.Fatal(err)
				}
			}
			root := filepath.Join(data, "workspaces")
			if err := os.Mkdir(root, 0o711); err != nil {
				b.Fatal(err)
			}
			cfg := sandbox.PoolConfig{Provider: prov, WorkspaceRoot: root, Limits: sandbox.Limits{CommandTimeout: 15 * time.Minute}}
			var vols *volume.Volumes
			if !c.noVolumes {
				v, err := volume.New(volume.Config{Root: root, SizeBytes: c.size, Inodes: c.inodes, ReserveBytes: c.reserve})
				if err != nil {
					b.Fatal(err)
				}
				vols, cfg.Volumes = v, v
			}
			p, err := sandbox.NewPool(cfg)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() {
				_ = p.Stop()
				if vols != nil {
					_ = vols.Close()
				}
			})
			run := func(cmd string) string {
				in, _ := json.Marshal(map[string]any{"command": cmd, "timeout_ms": 15 * 60 * 1000})
				res, err := p.Execute(context.Background(), &sandbox.Call{Recipe: sandbox.Recipe{SessionID: "s"}, Name: "bash", Input: in})
				if err != nil {
					b.Fatalf("%s: %v", cmd, err)
				}
				return res.Text()
			}
			fsState := func(what string) {
				var st syscall.Statfs_t
				if err := syscall.Statfs(data, &st); err != nil {
					b.Fatal(err)
				}
				werr := os.WriteFile(filepath.Join(data, "store-probe"), make([]byte, 1<<20), 0o600)
				_ = os.Remove(filepath.Join(data, "store-probe"))
				ok := 1.0
				if werr != nil {
					ok = 0
				}
				b.ReportMetric(float64(int64(st.Bavail)*st.Bsize>>20), what+"-data-free-MiB")
				b.ReportMetric(float64(st.Ffree), what+"-data-free-inodes")
				b.ReportMetric(ok, what+"-store-writes")
				b.Logf("after %s: data filesystem %d MiB and %d inodes free; a 1 MiB store write: %v", what,
					int64(st.Bavail)*st.Bsize>>20, st.Ffree, werr)
			}
			out := run("dd if=/dev/zero of=/workspace/big bs=1M count=2500 2>&1 | tail -1; stat -c %s /workspace/big")
			b.Logf("2.5 GB: %s", out)
			b.ReportMetric(float64(lastNumber(out)>>20), "written-MiB")
			fsState("write")
			run("rm -f /workspace/big")
			out = run("mkdir -p /workspace/m && cd /workspace/m && seq -f f%g 1 300000 | xargs touch 2>&1 | tail -1; ls | wc -l")
			b.Logf("300,000 files: %s", out)
			b.ReportMetric(float64(lastNumber(out)), "files")
			fsState("files")
			if !strings.Contains(out, "quota:") && !c.noVolumes {
				b.Errorf("no quota note: %q", out)
			}
		})
	}
}

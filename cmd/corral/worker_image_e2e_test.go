package main

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/image/imagetest"
	"github.com/corralhq/corral/internal/model/modeltest"
)

// TestCorralWorkerImage: `corral worker --images debian --package apt=jq=VERSION` runs a self-hosted session's
// tools on the Debian base with the worker's package, though the environment lists none (a self-hosted one
// cannot): the sandbox has the pinned jq (the host has another version), the base's dpkg database rather than
// the host's, and no debootstrap (which the host has: it builds the images).
func TestCorralWorkerImage(t *testing.T) {
	t.Parallel()
	requireBwrap(t)
	imagetest.Base(t) // the machine's shared base: the worker finds it in the cache startCorral gives it
	script := `grep '^VERSION_CODENAME=' /etc/os-release; command -v debootstrap || echo no-debootstrap; ` +
		`echo '{"a": 5}' | jq .a; dpkg-query -W -f 'jq ${Version}\n' jq; md5sum /var/lib/dpkg/status`
	input, err := json.Marshal(map[string]string{"command": script})
	if err != nil {
		t.Fatal(err)
	}
	s, client := workerServer(t, "20s",
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{Name: "bash", Input: string(input)}}},
		modeltest.Turn{Text: "jq is there."},
	)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	sess, envID, key := selfHostedSession(ctx, t, client, "worker-image")

	data := t.TempDir()
	w := startCorral(t, os.Environ(), "corral: worker ", "worker", "--url", s.url, "--env", envID, "--key", key,
		"--data", data, "--worker-id", "image-worker", "--sandbox", "bwrap", "--sandbox-uids", "420000",
		"--images", "debian", "--package", "apt="+jqImage, "--egress-allow-internal", strings.Join(imagetest.RegistryGateways(), ","))
	if line := w.stderr.String(); !strings.Contains(line, "image debian with apt="+jqImage) {
		t.Errorf("the worker's first line does not name its image: %s", line)
	}

	l := sendAndFollow(ctx, t, client, sess.ID, "Use jq.")
	if len(l.uses) != 1 {
		t.Fatalf("uses %v, results %v; events %v", l.uses, l.results, l.types)
	}
	out := l.results[l.uses[0]]
	t.Logf("the tool's output:\n%s", out)
	hostStatus, err := os.ReadFile("/var/lib/dpkg/status")
	if err != nil {
		t.Fatal(err)
	}
	sum := md5.Sum(hostStatus)
	if _, err := exec.LookPath("debootstrap"); err != nil {
		t.Fatalf("the host has no debootstrap, yet built images: %v", err)
	}
	for _, want := range []string{"VERSION_CODENAME=bookworm", "no-debootstrap", "5\n", "jq " + strings.TrimPrefix(jqImage, "jq=")} {
		if !strings.Contains(out, want) {
			t.Errorf("the tool's output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, hex.EncodeToString(sum[:])) {
		t.Errorf("the sandbox has the host's dpkg database, not the image's:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(data, "workspaces", sess.ID)); err != nil {
		t.Errorf("the session's workspace on the worker: %v", err)
	}
}

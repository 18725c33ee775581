package bwrap

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/corralhq/corral/internal/sandbox/agent"
)

// stageEtc builds, under dir, the minimal /etc every sandbox of this Provider without an image sees
// (agent.EtcFiles, copied by agent.CopyEtc), so that a sandbox binds one directory instead of a dozen files:
// bwrap reads the whole mount table again for every read-only bind, which made most of a sandbox's start. Only
// what any user may read on the host is copied, with its permission bits (so /etc/ssl/private stays out);
// symbolic links are kept as links. The copy is taken when the Provider starts.
func stageEtc(dir string) (string, error) {
	etc := filepath.Join(dir, "etc")
	if err := os.RemoveAll(etc); err != nil {
		return "", fmt.Errorf("bwrap: stage /etc: %w", err)
	}
	src, err := os.OpenRoot("/etc")
	if err != nil {
		return "", fmt.Errorf("bwrap: stage /etc: %w", err)
	}
	defer src.Close()
	if err := agent.CopyEtc(etc, src, agent.EtcFiles); err != nil {
		return "", fmt.Errorf("bwrap: stage /etc: %w", err)
	}
	return etc, nil
}

func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// stagedAgent is the name of the agent binary's copy in a StateDir.
const stagedAgent = "agent"

// stageAgent puts the agent binary into dir, a hard link where dir is on the binary's filesystem and a copy
// otherwise, and returns its path. A sandbox's mount table shows each bind's source path, and the binary may
// live in the data directory (corral serve copies itself to <data>/bin); dir's path says nothing.
func stageAgent(dir, agentPath string) (string, error) {
	dst := filepath.Join(dir, stagedAgent)
	if err := os.Remove(dst); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("bwrap: stage agent: %w", err)
	}
	if err := os.Link(agentPath, dst); err == nil {
		return dst, nil
	}
	if err := copyFile(agentPath, dst, 0o755); err != nil {
		return "", fmt.Errorf("bwrap: stage agent: %w", err)
	}
	return dst, nil
}

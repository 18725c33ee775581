package bwrap

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/corralhq/corral/internal/sandbox/host"
)

// stageEtc builds, under dir, the minimal /etc every sandbox of this Provider without an image sees
// (host.EtcFiles, copied by host.CopyEtc), so that a sandbox binds one directory instead of a dozen files:
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
	if err := host.CopyEtc(etc, src, host.EtcFiles); err != nil {
		return "", fmt.Errorf("bwrap: stage /etc: %w", err)
	}
	return etc, nil
}

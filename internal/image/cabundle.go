package image

import (
	"os"
	"path/filepath"
)

// BuilderCAFile returns the CA bundle the builds trust (LayerConfig.CAFile): "" with no extra CAs (the
// builds trust the host's bundle as it is), else dir/builder-ca.pem, written with the host's bundle followed
// by extraPEM (the operator's --egress-ca-file, e.g. a TLS-inspecting proxy's or an internal mirror's CA).
func BuilderCAFile(dir string, extraPEM []byte) (string, error) {
	if len(extraPEM) == 0 {
		return "", nil
	}
	sys, _ := os.ReadFile(hostCABundle) // a host without the bundle trusts the extra CAs alone
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "builder-ca.pem")
	if err := os.WriteFile(path, append(append(sys, '\n'), extraPEM...), 0o644); err != nil {
		return "", err
	}
	return path, nil
}

package oci

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/corralhq/corral/internal/sandbox/agent"
	"github.com/corralhq/corral/internal/sandbox/host"
	"github.com/corralhq/corral/internal/sandbox/seccomp"
)

// BundleSpec is what a sandbox's OCI bundle is generated from.
type BundleSpec struct {
	UID          int
	WorkspaceDir string
	AgentPath    string
	ProxySocket  string // host path; "" for none
	CgroupsPath  string // linux.cgroupsPath; "" leaves cgroups to the runtime's default
	MemoryBytes  int64
	Pids         int
	CPUQuota     float64
	// TmpBytes and TmpInodes bound the /tmp tmpfs (0: the kernel's defaults).
	TmpBytes, TmpInodes int64
	// TmpSource, if set, is a host directory (a bounded tmpfs: Config.HostTmp) bound at /tmp instead.
	TmpSource string
	// Env is the agent's environment; nil means host.SandboxEnv().
	Env []string
	// CAFile, if set, is the host file of the sandbox's CA bundle (host.Staged.CAFile), bound read-only at
	// host.CABundlePath and at each of CAOverlays.
	CAFile     string
	CAOverlays []string
	// AllowClone3 leaves clone3 out of the seccomp profile (Config.AllowClone3).
	AllowClone3 bool
	// ShellNamespace has the agent start its shells in namespaces of their own, and lets it make them
	// (Config.ShellNamespace).
	ShellNamespace bool
	// Mounts are extra binds (host.SessionMounts: the session's uploads, outputs, skills and memory stores).
	Mounts []host.Mount
	// Image, if set, is the image the sandbox runs on (sandbox.HostDirs.RootFS): its top-level directories are
	// bound read-only instead of the host's /usr and /etc files.
	Image *host.ImageRoot
}

// WriteBundle writes an OCI bundle into dir: an empty read-only rootfs of mount points, and a config.json that
// runs the agent as spec.UID with no capabilities and no new privileges, in new pid, mount, network, ipc, uts
// and cgroup namespaces, with /usr and a minimal /etc bound read-only (or the image's top-level directories,
// spec.Image), the workspace read-write at /workspace, a private /tmp, and the resource limits in
// linux.resources. gVisor's runsc reads the same bundle.
func WriteBundle(dir string, spec BundleSpec) error {
	rootfs := filepath.Join(dir, "rootfs")
	points := []string{"usr", "etc"}
	if spec.Image != nil {
		points = append([]string{"etc"}, spec.Image.Dirs...)
	}
	for _, d := range append([]string{"workspace", "tmp", "proc", "dev", ".corral"}, points...) {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			return fmt.Errorf("bundle: %w", err)
		}
	}
	// runc gives a tmpfs the mode of the directory it covers.
	if err := os.Chmod(filepath.Join(rootfs, "tmp"), 0o1777); err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	mounts, err := bundleMounts(rootfs, &spec)
	if err != nil {
		return err
	}
	env := spec.Env
	if env == nil {
		env = host.SandboxEnv()
	}
	args := []string{agent.BinPath}
	if spec.ShellNamespace {
		args = append(args, "-shell-namespace")
	}
	noCaps := map[string]any{"bounding": []string{}, "effective": []string{}, "inheritable": []string{}, "permitted": []string{}, "ambient": []string{}}
	config := map[string]any{
		"ociVersion": "1.0.2",
		"process": map[string]any{
			"terminal":        false,
			"user":            map[string]any{"uid": spec.UID, "gid": spec.UID, "additionalGids": []int{}},
			"args":            args,
			"env":             env,
			"cwd":             agent.Workspace,
			"capabilities":    noCaps,
			"noNewPrivileges": true,
		},
		"root":     map[string]any{"path": "rootfs", "readonly": true},
		"hostname": "sandbox",
		"mounts":   mounts,
		"linux":    linuxConfig(&spec),
	}
	b, err := json.MarshalIndent(config, "", "\t")
	if err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o600); err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	return nil
}

// bundleMounts are the container's mounts, in order, with their mount points made in rootfs: /proc, /dev, /tmp,
// the image's directories or the host's /usr and /etc files, the workspace, the session's files, the agent, the
// CA bundle and the proxy's socket.
func bundleMounts(rootfs string, spec *BundleSpec) ([]map[string]any, error) {
	var mounts []map[string]any
	mount := func(dst, typ, src string, opts ...string) {
		mounts = append(mounts, map[string]any{"destination": dst, "type": typ, "source": src, "options": opts})
	}
	mount("/proc", "proc", "proc", "nosuid", "noexec", "nodev")
	mount("/dev", "tmpfs", "tmpfs", "nosuid", "strictatime", "mode=755", "size=65536k")
	mount("/dev/pts", "devpts", "devpts", "nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620")
	mount("/dev/shm", "tmpfs", "shm", "nosuid", "noexec", "nodev", "mode=1777", "size=65536k")
	if spec.TmpSource != "" {
		mount("/tmp", "bind", spec.TmpSource, "rbind", "nosuid", "nodev")
	} else {
		mount("/tmp", "tmpfs", "tmpfs", tmpOptions(spec)...)
	}
	if spec.Image != nil {
		if err := imageMounts(rootfs, spec.Image, mount); err != nil {
			return nil, err
		}
	} else if err := hostMounts(rootfs, mount); err != nil {
		return nil, err
	}
	mount(agent.Workspace, "bind", spec.WorkspaceDir, "rbind", "nosuid", "nodev")
	for _, m := range spec.Mounts {
		if err := os.MkdirAll(filepath.Join(rootfs, m.Target), 0o755); err != nil {
			return nil, fmt.Errorf("bundle: %w", err)
		}
		opts := []string{"rbind", "nosuid", "nodev"}
		if m.ReadOnly {
			opts = append(opts, "ro")
		}
		mount(m.Target, "bind", m.Source, opts...)
	}
	// The agent, the CA bundle and the proxy's socket are files of the host bound on empty files of rootfs.
	type point struct {
		dst  string
		perm os.FileMode
	}
	points := []point{{agent.BinPath, 0o755}}
	if spec.CAFile != "" {
		points = append(points, point{host.CABundlePath, 0o444})
	}
	if spec.ProxySocket != "" {
		points = append(points, point{agent.ProxySocketPath, 0o644})
	}
	for _, f := range points {
		if err := os.WriteFile(filepath.Join(rootfs, f.dst), nil, f.perm); err != nil {
			return nil, fmt.Errorf("bundle: %w", err)
		}
	}
	mount(agent.BinPath, "bind", spec.AgentPath, "bind", "ro", "nosuid", "nodev")
	if spec.CAFile != "" {
		for _, dst := range append([]string{host.CABundlePath}, spec.CAOverlays...) {
			mount(dst, "bind", spec.CAFile, "bind", "ro", "nosuid", "nodev", "noexec")
		}
	}
	if spec.ProxySocket != "" {
		mount(agent.ProxySocketPath, "bind", spec.ProxySocket, "bind", "ro", "nosuid", "nodev", "noexec")
	}
	return mounts, nil
}

// tmpOptions are the options of the /tmp tmpfs, bounded by spec.TmpBytes and TmpInodes.
func tmpOptions(spec *BundleSpec) []string {
	opts := []string{"nosuid", "nodev", "mode=1777"}
	if spec.TmpBytes > 0 {
		opts = append(opts, fmt.Sprintf("size=%d", spec.TmpBytes))
	}
	if spec.TmpInodes > 0 {
		opts = append(opts, fmt.Sprintf("nr_inodes=%d", spec.TmpInodes))
	}
	return opts
}

// linuxConfig is the bundle's linux section: the resource limits, the namespaces, the masked and read-only
// paths of /proc and the seccomp profile.
func linuxConfig(spec *BundleSpec) map[string]any {
	resources := map[string]any{"devices": []map[string]any{{"allow": false, "access": "rwm"}}}
	if spec.MemoryBytes > 0 {
		resources["memory"] = map[string]any{"limit": spec.MemoryBytes, "swap": spec.MemoryBytes}
	}
	if spec.Pids > 0 {
		resources["pids"] = map[string]any{"limit": spec.Pids}
	}
	if spec.CPUQuota > 0 {
		resources["cpu"] = map[string]any{"quota": int64(spec.CPUQuota * 100000), "period": 100000}
	}
	linux := map[string]any{
		"resources": resources,
		"namespaces": []map[string]any{
			{"type": "pid"}, {"type": "network"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}, {"type": "cgroup"},
		},
		"maskedPaths": []string{"/proc/cmdline", "/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
			"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware"},
		"readonlyPaths": []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"},
		"seccomp":       seccomp.OCIProfile(spec.AllowClone3, spec.ShellNamespace),
	}
	if spec.CgroupsPath != "" {
		linux["cgroupsPath"] = spec.CgroupsPath
	}
	return linux
}

// hostMounts binds the host's /usr, makes its top-level links to it again and binds the minimal /etc
// (host.EtcFiles), all read-only.
func hostMounts(rootfs string, mount func(dst, typ, src string, opts ...string)) error {
	mount("/usr", "bind", "/usr", "rbind", "ro", "nosuid", "nodev")
	for _, l := range []string{"bin", "lib", "lib64", "sbin", "lib32", "libx32"} {
		if target, err := os.Readlink("/" + l); err == nil {
			if err := os.Symlink(target, filepath.Join(rootfs, l)); err != nil && !os.IsExist(err) {
				return fmt.Errorf("bundle: %w", err)
			}
		}
	}
	for _, f := range host.EtcFiles {
		src := "/etc/" + f
		fi, err := os.Stat(src)
		if err != nil {
			continue
		}
		dst := filepath.Join(rootfs, "etc", f)
		if fi.IsDir() {
			err = os.MkdirAll(dst, 0o755)
		} else {
			err = os.WriteFile(dst, nil, 0o644)
		}
		if err != nil {
			return fmt.Errorf("bundle: %w", err)
		}
		mount(src, "bind", src, "rbind", "ro", "nosuid", "nodev")
	}
	return nil
}

// imageMounts binds the image's top-level directories read-only and makes its top-level links again.
func imageMounts(rootfs string, image *host.ImageRoot, mount func(dst, typ, src string, opts ...string)) error {
	for _, d := range image.Dirs {
		mount("/"+d, "bind", filepath.Join(image.Dir, d), "rbind", "ro", "nosuid", "nodev")
	}
	for _, l := range image.Links {
		if err := os.Symlink(l.Target, filepath.Join(rootfs, l.Name)); err != nil {
			return fmt.Errorf("bundle: %w", err)
		}
	}
	mount("/etc", "bind", image.Etc, "rbind", "ro", "nosuid", "nodev")
	return nil
}

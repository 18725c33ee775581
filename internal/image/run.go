package image

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/corralhq/corral/internal/sandbox/cgroup"
	"github.com/corralhq/corral/internal/sandbox/egress"
	"github.com/corralhq/corral/internal/sandbox/seccomp"
)

// toolchains are the apt packages a manager's client comes from.
var toolchains = map[string][]string{
	Pip:   {"python3-pip"},
	Npm:   {"nodejs"}, // npm itself comes from the npm registry (NpmVersion): Debian's pulls in ~300 node-* packages
	Gem:   {"ruby"},
	Cargo: {"cargo"},
}

// builderCA is where the builder's clients find the CA bundle they trust (LayerConfig.CAFile).
const builderCA = "/.corral/ca.pem"

// stepMarker starts each step's output in the build log: "@@corral-step MANAGER PACKAGE".
const stepMarker = "@@corral-step "

// script is the build's shell script: apt first (the packages and the managers' toolchains), then each
// package of each manager on its own, so that a failure names its package.
func script(c LayerConfig, l List) string {
	var b strings.Builder
	b.WriteString("set -eu\nexport DEBIAN_FRONTEND=noninteractive\nstep() { echo; echo '" + stepMarker + "'\"$1 $2\"; }\n")
	b.WriteString("printf '#!/bin/sh\\nexit 101\\n' > /usr/sbin/policy-rc.d; chmod 755 /usr/sbin/policy-rc.d\n")
	files := c.Registries.Files(c.Suite, l.Managers()...)
	for _, path := range slices.Sorted(maps.Keys(files)) {
		fmt.Fprintf(&b, "mkdir -p %s\nprintf '%%s' %s > %s\n", quote(filepath.Dir(path)), quote(files[path]), quote(path))
	}
	apt := slices.Clone(l[Apt])
	for _, m := range l.Managers() {
		apt = append(apt, toolchains[m]...)
	}
	aptGet := "apt-get -q -o APT::Sandbox::User=root -o Acquire::Retries=1 -o Dpkg::Use-Pty=0"
	if c.CAFile != "" {
		aptGet += " -o Acquire::https::CAInfo=" + builderCA
	}
	if len(apt) > 0 {
		b.WriteString("step apt update\n" + aptGet + " update --error-on=any\n")
		fmt.Fprintf(&b, "step apt %s\n%s install -y --no-install-recommends %s\n", quote(strings.Join(l[Apt], " ")), aptGet, quoteAll(apt))
		b.WriteString(aptGet + " clean\nrm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin\n")
	}
	for _, p := range l[Pip] {
		fmt.Fprintf(&b, "step pip %s\npython3 -m pip install --no-cache-dir --break-system-packages --root-user-action=ignore --disable-pip-version-check --no-input %s\n", quote(p), quote(p))
	}
	if len(l[Npm]) > 0 {
		reg := orDefault(c.Registries.Get(Npm).URL, "https://registry.npmjs.org")
		fmt.Fprintf(&b, "step npm %s\nmkdir -p /usr/local/lib/node_modules/npm /usr/local/bin\ncurl -fsSL --retry 2 %s | tar -xz --strip-components=1 --no-same-owner -C /usr/local/lib/node_modules/npm\nln -sf ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm\nln -sf ../lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx\nmkdir -p /usr/etc\necho prefix=/usr/local > /usr/etc/npmrc\n",
			quote("toolchain npm "+c.NpmVersion), quote(fmt.Sprintf("%s/npm/-/npm-%s.tgz", reg, c.NpmVersion)))
	}
	for _, p := range l[Npm] {
		fmt.Fprintf(&b, "step npm %s\nnpm install --global --no-fund --no-audit --no-update-notifier %s\n", quote(p), quote(p))
	}
	if len(l[Npm]) > 0 {
		// Debian's node resolves require() in /usr/share/nodejs, not in npm's global node_modules: link the
		// global packages there, so that require("pkg") finds them from any directory.
		b.WriteString("npm cache clean --force >/dev/null 2>&1 || true\nmkdir -p /usr/share/nodejs\n" +
			"for p in /usr/local/lib/node_modules/*; do n=${p##*/}; [ \"$n\" = npm ] || [ -e \"/usr/share/nodejs/$n\" ] || ln -s \"$p\" \"/usr/share/nodejs/$n\"; done\n")
	}
	for _, p := range l[Cargo] {
		fmt.Fprintf(&b, "step cargo %s\nCARGO_HOME=/usr/local/cargo cargo install --root /usr/local %s\n", quote(p), quote(p))
	}
	for _, p := range l[Gem] {
		name, version, _ := strings.Cut(p, ":")
		cmd := "gem install --no-document " + quote(name)
		if version != "" {
			cmd += " --version " + quote(version)
		}
		if u := c.Registries.Get(Gem).URL; u != "" {
			cmd += " --clear-sources --source " + quote(u+"/")
		}
		fmt.Fprintf(&b, "step gem %s\n%s\n", quote(p), cmd)
	}
	if len(l[Go]) > 0 {
		proxy := orDefault(c.Registries.Get(Go).URL, "https://proxy.golang.org")
		zip := fmt.Sprintf("%s/golang.org/toolchain/@v/v0.0.1-%s.linux-%s.zip", proxy, c.GoVersion, goArch)
		fmt.Fprintf(&b, "step go %s\ncurl -fsSL --retry 2 -o /tmp/go.zip %s\npython3 -c %s\nrm -f /tmp/go.zip\n",
			quote("toolchain "+c.GoVersion), quote(zip), quote(unzipGo))
		b.WriteString("ln -sf ../go/bin/go /usr/local/bin/go\nln -sf ../go/bin/gofmt /usr/local/bin/gofmt\n")
		fmt.Fprintf(&b, "export GOPROXY=%s\n", quote(proxy))
		b.WriteString("export GOTOOLCHAIN=local GOBIN=/usr/local/bin GOPATH=/tmp/gopath GOCACHE=/tmp/gocache GOFLAGS=-modcacherw\n")
		for _, p := range l[Go] {
			fmt.Fprintf(&b, "step go %s\ngo install %s\n", quote(p), quote(p))
		}
	}
	b.WriteString("step done -\nrm -f /usr/sbin/policy-rc.d\nrm -rf /tmp/* /var/tmp/* /root/.cache /root/.npm /usr/local/cargo/registry /usr/local/cargo/git\n")
	return b.String()
}

func orDefault(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// unzipGo unpacks /tmp/go.zip (the golang.org/toolchain module: every path under golang.org/toolchain@VERSION/) into
// /usr/local/go, with the files' modes.
const unzipGo = `import os, zipfile
with zipfile.ZipFile("/tmp/go.zip") as z:
    for i in z.infolist():
        parts = i.filename.split("/", 2)
        if len(parts) < 3 or not parts[2] or ".." in parts[2].split("/"):
            continue
        dst = os.path.join("/usr/local/go", parts[2])
        if i.is_dir():
            os.makedirs(dst, exist_ok=True)
            continue
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        with z.open(i) as src, open(dst, "wb") as out:
            while True:
                b = src.read(1 << 20)
                if not b:
                    break
                out.write(b)
        mode = (i.external_attr >> 16) & 0o777
        os.chmod(dst, mode or 0o644)
`

// quote is s as one shell word.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = quote(s)
	}
	return strings.Join(q, " ")
}

// runBuild runs the build's script in the builder sandbox on merged (the overlay), its egress limited to the
// registries of the list's managers, and turns a failure into a *BuildError naming the package.
func runBuild(ctx context.Context, c LayerConfig, l List, st *stage) error {
	managers := l.Managers()
	if !slices.Contains(managers, Apt) && slices.ContainsFunc(managers, func(m string) bool { return len(toolchains[m]) > 0 }) {
		managers = append([]string{Apt}, managers...)
	}
	sock := filepath.Join(st.run(), "proxy.sock")
	var refusals refusals
	proxy, err := egress.Listen(egress.Config{Path: sock, UID: c.BuilderUID, GID: c.BuilderUID,
		Policy: egress.Policy{Hosts: c.Registries.Hosts(managers...), AllowInternal: c.AllowInternal}, Logger: c.Log,
		Refused: refusals.add})
	if err != nil {
		return &BuildError{Message: err.Error()}
	}
	defer proxy.Close()
	filter, err := seccomp.Program()
	if err != nil {
		return &BuildError{Message: err.Error()}
	}
	sr, sw, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("image: %w", err)
	}
	defer sr.Close()
	_, werr := sw.Write(filter)
	sw.Close()
	if werr != nil {
		return fmt.Errorf("image: %w", werr)
	}
	var group *cgroup.Group
	if c.CgroupRoot != "" {
		group, err = cgroup.New(c.CgroupRoot, buildGroup(st.dir), cgroup.Limits{MemoryBytes: c.MemoryBytes, Pids: c.Pids})
		if err != nil {
			return &BuildError{Message: err.Error()}
		}
		defer func() { group.Kill(); _ = group.Remove() }()
	}
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LC_ALL=C.UTF-8", "TERM=dumb"}
	args := []string{
		"--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
		"--die-with-parent", "--new-session", "--hostname", "builder",
		"--bind", st.root(), "/",
		"--proc", "/proc", "--dev", "/dev",
		"--ro-bind", st.agent(), "/.corral/agent",
		"--ro-bind", st.run(), "/.corral/run",
	}
	if c.CAFile != "" {
		args = append(args, "--ro-bind", st.ca(), builderCA)
		for _, k := range []string{"SSL_CERT_FILE", "CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE", "PIP_CERT", "NODE_EXTRA_CA_CERTS", "npm_config_cafile", "GIT_SSL_CAINFO", "CARGO_HTTP_CAINFO"} {
			env = append(env, k+"="+builderCA)
		}
	}
	for k, v := range c.Registries.Env(managers...) {
		env = append(env, k+"="+v)
	}
	args = append(args, "--chdir", "/", "--clearenv")
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		args = append(args, "--setenv", k, v)
	}
	// fds in the child: 3 = the seccomp filter, 4 = bwrap's info (the child's pid), 5 = the block bwrap waits on
	// until that pid is in the build's cgroup.
	args = append(args, "--seccomp", "3", "--info-fd", "4", "--block-fd", "5", "--", "/.corral/agent", "bridge-exec", "/.corral/run/proxy.sock", "/bin/sh", "-c", script(c, l))
	cmd := exec.CommandContext(ctx, c.Bwrap, args...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	infoR, infoW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("image: %w", err)
	}
	defer infoR.Close()
	blockR, blockW, err := os.Pipe()
	if err != nil {
		infoW.Close()
		return fmt.Errorf("image: %w", err)
	}
	defer blockW.Close()
	cmd.ExtraFiles = []*os.File{sr, infoW, blockR}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:                 syscall.CLONE_NEWUSER,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: c.BuilderUID, Size: builderUIDs}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: c.BuilderUID, Size: builderUIDs}},
		GidMappingsEnableSetgroups: true,
		Credential:                 &syscall.Credential{Uid: 0, Gid: 0},
		Setpgid:                    true,
		Pdeathsig:                  syscall.SIGKILL,
	}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	out := &stepLog{log: c.Log}
	cmd.Stdout, cmd.Stderr = out, out
	err = cmd.Start()
	infoW.Close()
	blockR.Close()
	if err == nil {
		err = startBuild(infoR, blockW, group)
		if werr := cmd.Wait(); err == nil {
			err = werr
		}
	}
	if err == nil {
		return nil
	}
	manager, pkg, output := out.step()
	be := &BuildError{Manager: manager, Package: pkg}
	if manager == Apt && pkg == "update" {
		be.Package = ""
	}
	if manager == Apt && pkg != "update" {
		be.Package = aptCulprit(output, l[Apt])
	}
	toolchain, isToolchain := strings.CutPrefix(pkg, "toolchain ")
	if isToolchain {
		be.Package = ""
	}
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded) && strings.Contains(output, "No space left on device"):
		// Some clients (apt's update) hang on a full disk instead of failing.
		be.Message = fmt.Sprintf("the build ran past its disk limit (%d MiB): %s", c.DiskBytes>>20, strings.TrimSpace(tail(output, 1500)))
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		be.Message = fmt.Sprintf("the build ran past its time limit (%s)", c.Timeout)
	case ctx.Err() != nil:
		be.Message = "the build was cancelled: " + ctx.Err().Error()
	case manager == "":
		be.Message = fmt.Sprintf("the builder did not start: %v: %s", err, strings.TrimSpace(tail(output, 1024)))
	default:
		be.Message = classify(manager, pkg, output, c, refusals.list())
	}
	if isToolchain {
		be.Message = "installing its toolchain (" + toolchain + "): " + be.Message
	}
	return be
}

// refusals are the destinations the builder's proxy refused during a build, as it gave them ("host: why"),
// the first few of them: clients show only a 403 or a failed tunnel, the proxy knows why (an internal address
// the operator has not trusted with --egress-allow-internal, a host that is no registry of the list).
type refusals struct {
	mu   sync.Mutex
	seen []string
}

const maxRefusals = 4

func (r *refusals) add(host string, err error) {
	msg := host + ": " + strings.TrimPrefix(err.Error(), egress.ErrDenied.Error()+": ")
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.seen) < maxRefusals && !slices.Contains(r.seen, msg) {
		r.seen = append(r.seen, msg)
	}
}

func (r *refusals) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seen)
}

// classify says why a step failed, from its output and the destinations the builder's proxy refused: an unknown
// package, a version that does not exist, a registry that cannot be reached, the disk limit; then the output's
// last lines. A refusal is named whatever the client made of it (pip, for one, reports an unreachable index
// as a version it cannot find).
func classify(manager, pkg, output string, c LayerConfig, refused []string) string {
	low := strings.ToLower(output)
	has := func(subs ...string) bool {
		for _, s := range subs {
			if strings.Contains(low, strings.ToLower(s)) {
				return true
			}
		}
		return false
	}
	var why string
	switch {
	case has("No space left on device", "ENOSPC", "Disk quota exceeded"):
		why = fmt.Sprintf("the build ran past its disk limit (%d MiB)", c.DiskBytes>>20)
	case has("destination not allowed", "not in the environment's allowed_hosts", "resolves to an internal address", "403  Forbidden [IP: 127.0.0.1 3128]"):
		why = "the registry could not be reached: the builder's proxy refused the destination (only the registries of " + strings.Join(c.Registries.Hosts(manager), ", ") + " are open)"
	case has("Could not resolve", "Temporary failure resolving", "Failed to fetch", "ECONNREFUSED", "ENOTFOUND", "ETIMEDOUT", "EAI_AGAIN",
		"Connection refused", "connection reset", "Could not fetch URL", "ProxyError", "Network is unreachable", "502 Bad Gateway",
		"Unable to connect", "curl: (7)", "curl: (6)", "curl: (56)", "curl: (22)", "Could not connect", "dial tcp", "Errno::ECONNREFUSED", "SocketError"):
		why = "the registry could not be reached"
	case manager == Apt && has("Unable to locate package", "has no installation candidate"):
		why = "unknown package"
	case manager == Apt && has("Version '", "was not found"):
		why = "no such version"
	case manager == Npm && has("No matching version found", "notarget"):
		why = "no such version"
	case manager == Npm && has("E404", "is not in this registry", "404 Not Found"):
		why = "unknown package"
	case manager == Pip && has("(from versions: none)"):
		why = "unknown package (or no version of it for this Python)"
	case manager == Pip && has("No matching distribution found", "Could not find a version that satisfies"):
		why = "no such version"
	case manager == Go && has("requires go >="):
		why = "the module needs a newer Go than the image's " + c.GoVersion
	case manager == Go && has("invalid version", "unknown revision", "no matching versions", "module version is not available"):
		why = "no such version"
	case manager == Go && has("404 Not Found", "410 Gone", "malformed module path", "cannot find module", "not a main package", "module does not contain package"):
		why = "unknown package"
	case manager == Cargo && has("could not find", "does not have a version"):
		if has("does not have a version", "with version") {
			why = "no such version"
		} else {
			why = "unknown package"
		}
	case manager == Gem && has("Could not find a valid gem"):
		if strings.Contains(pkg, ":") {
			why = "no such version (or unknown package)"
		} else {
			why = "unknown package"
		}
	default:
		why = "the install failed"
	}
	switch r := strings.Join(refused, "; "); {
	case r == "":
	case strings.HasPrefix(why, "the registry could not be reached"):
		why = "the registry could not be reached: the builder's proxy refused " + r +
			" (only the registries of " + strings.Join(c.Registries.Hosts(manager), ", ") + " are open)"
	default:
		why += " (the builder's proxy refused " + r + ")"
	}
	return why + ": " + strings.TrimSpace(tail(output, 1500))
}

// aptCulprit picks, from apt's output, the package of the list apt named in its error; "" when it named none
// of them (the whole apt list is then at fault).
func aptCulprit(output string, pkgs []string) string {
	for _, line := range strings.Split(output, "\n") {
		if !strings.HasPrefix(line, "E: ") {
			continue
		}
		for _, p := range pkgs {
			name, version, _ := strings.Cut(p, "=")
			if strings.Contains(line, "package "+name) || strings.Contains(line, "'"+name+"'") ||
				(version != "" && strings.Contains(line, "'"+version+"'")) || strings.HasSuffix(line, " "+name) {
				return p
			}
		}
	}
	return strings.Join(pkgs, " ")
}

// stepLog keeps the output of the build's current step (the last 64 KiB), and sends every write to the log.
type stepLog struct {
	log *slog.Logger
	mu  sync.Mutex
	cur bytes.Buffer
	mgr string
	pkg string
}

func (s *stepLog) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	logWriter{s.log}.Write(p)
	for _, line := range bytes.SplitAfter(p, []byte("\n")) {
		if rest, ok := bytes.CutPrefix(line, []byte(stepMarker)); ok {
			m, pkg, _ := strings.Cut(strings.TrimSpace(string(rest)), " ")
			s.mgr, s.pkg = m, pkg
			s.cur.Reset()
			continue
		}
		s.cur.Write(line)
		if s.cur.Len() > 64<<10 {
			b := slices.Clone(s.cur.Bytes()[s.cur.Len()-32<<10:])
			s.cur.Reset()
			s.cur.Write(b)
		}
	}
	return len(p), nil
}

// step is the current step's manager and package, and its output.
func (s *stepLog) step() (manager, pkg, output string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mgr, s.pkg, s.cur.String()
}

var _ io.Writer = (*stepLog)(nil)

// startBuild reads the builder's pid from bwrap's info pipe, puts it in the build's cgroup (if any) and lets
// bwrap run the build. On an error the block pipe is closed unwritten, and bwrap gives up.
func startBuild(info io.Reader, block *os.File, group *cgroup.Group) error {
	defer block.Close()
	var v struct {
		ChildPID int `json:"child-pid"`
	}
	if err := json.NewDecoder(info).Decode(&v); err != nil || v.ChildPID <= 0 {
		return fmt.Errorf("image: the builder did not start (%v)", err)
	}
	if group != nil {
		if err := group.Add(v.ChildPID); err != nil {
			return fmt.Errorf("image: %w", err)
		}
	}
	_, err := block.Write([]byte{1})
	return err
}

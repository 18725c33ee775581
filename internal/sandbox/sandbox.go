// Package sandbox is the port to the hands: where model-written code runs. A Provider provisions a Sandbox from
// a Recipe (what the sandbox needs, wherever it runs) and HostDirs (where its files are on this host, for a
// Provider whose Capabilities use them); Sandbox.Execute runs one built-in tool call inside it. Pool puts the
// port's rules on top of any Provider: provision lazily on a session's first tool call, reuse, reap when idle,
// and replace a dead sandbox from the same recipe on the next call. Before a session's first sandbox the Pool
// has its Placer (internal/workspace) place the session's resources, and its EgressSource build the sandbox's
// Egress. Unavailable is the Hands of a server whose backend cannot run: every call's result says why.
package sandbox

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/apitype"
)

// ErrSandboxDead is returned (wrapped) by Execute when the sandbox died; the call's outcome is unknown and the
// sandbox must be replaced.
var ErrSandboxDead = errors.New("sandbox died")

// ErrLimit is wrapped beside ErrSandboxDead when the sandbox died because it reached one of its Limits (memory,
// processes): the failure is the limit's, not the backend's.
var ErrLimit = errors.New("sandbox limit reached")

// ErrProvision is returned (wrapped) by Pool.Execute when no sandbox could be provisioned for the call.
var ErrProvision = errors.New("sandbox provisioning failed")

// ErrRootFSUnsupported is returned (wrapped) by the Provision of a backend that cannot give a sandbox a root
// of its own (process) for HostDirs with a RootFS.
var ErrRootFSUnsupported = errors.New("this sandbox backend cannot run a sandbox on an environment image")

// Provider provisions sandboxes of one backend (bwrap, runc, gvisor, process).
type Provider interface {
	// Name is the backend's name, as in --sandbox.
	Name() string
	// Tools are the built-in tools its sandboxes run, in the order the model is offered them. The slice and
	// its schemas are shared: callers must not modify them.
	Tools() []Tool
	// Capabilities say what its sandboxes need of this host; the Pool does only the host-side steps they use.
	Capabilities() Capabilities
	// Provision starts a sandbox for the recipe. host are its directories on this host, as far as the
	// Capabilities use them (the Pool leaves the others empty): with HostWorkspace, the sandbox's /workspace is
	// host.Workspace and its session mounts are under host.Session; with StagedWorkspace, those are what it
	// copies into the new sandbox; with RootFSHostDir, it runs on host.RootFS (empty: the host's layout).
	Provision(ctx context.Context, r *Recipe, host HostDirs) (Sandbox, error)
}

// WorkspaceKeeper is a Provider without host workspaces whose sessions' workspaces outlive their sandboxes where
// those run (a volume of a cluster): Pool.RemoveWorkspaces removes a gone session's through it.
type WorkspaceKeeper interface {
	// Workspaces lists the sessions that have a workspace.
	Workspaces(ctx context.Context) ([]string, error)
	// RemoveWorkspace deletes the session's workspace. Idempotent.
	RemoveWorkspace(ctx context.Context, sessionID string) error
}

// Capabilities say what a Provider's sandboxes need of the host the Pool runs on, so that a backend whose
// sandboxes run on other machines (pods on a cluster) is spared the steps only a local one uses.
type Capabilities struct {
	// HostWorkspace: the sandbox's /workspace and the session's files are directories of this host
	// (HostDirs.Workspace and Session, under PoolConfig.WorkspaceRoot): the Pool makes them, attaches their
	// volumes, has its Placer place the session's resources there before the first sandbox and collects the
	// outputs from there. False: the Pool makes no directory on this host, unless StagedWorkspace.
	HostWorkspace bool
	// StagedWorkspace: the sandboxes run elsewhere, and the Pool keeps a staging copy of each session's
	// directories on this host as it does with HostWorkspace (the Placer places the resources there); the
	// Provider copies them into each sandbox it provisions (where a workspace outlives its sandboxes, a resource
	// already there is left as the agent left it), and its sandboxes are Syncers, which copy the outputs and
	// memory stores back before the Pool collects them.
	StagedWorkspace bool
	// RootFS is how the backend runs a sandbox on an environment's image.
	RootFS RootFSKind
	// Egress is how a sandbox reaches the egress proxy the host runs for it.
	Egress EgressKind
}

// KeepsHostDirs: the Pool makes the sessions' directories on this host (HostWorkspace or StagedWorkspace).
func (c Capabilities) KeepsHostDirs() bool { return c.HostWorkspace || c.StagedWorkspace }

// Syncer is a Sandbox whose session files are where it runs (a Provider with Capabilities.StagedWorkspace):
// Sync copies its outputs directory and its read_write memory stores back into host (the staging copy), each
// replacing the copy there whole, before the Pool collects them. A failure leaves the staging copy as it was.
// The Pool runs one Sync and collection of a session at a time.
type Syncer interface {
	Sync(ctx context.Context, r *Recipe, host HostDirs) error
}

// RootFSKind is how a backend takes an environment's image.
type RootFSKind int

const (
	// RootFSNone: the sandbox runs on the host's own filesystem and cannot run on an image (process); HostDirs
	// with a RootFS are refused (ErrRootFSUnsupported).
	RootFSNone RootFSKind = iota
	// RootFSHostDir: the image is a directory of this host (HostDirs.RootFS), which the Pool acquires from
	// PoolConfig.Images before each provisioning.
	RootFSHostDir
	// RootFSImageRef: the backend's runtime pulls the environment's image by reference where its sandboxes run;
	// the Pool acquires no directory, and passes the reference (HostDirs.Image) if its Images are ImageRefs.
	RootFSImageRef
)

// EgressKind is how a sandbox reaches its egress proxy.
type EgressKind int

const (
	// EgressHostNetwork: the sandbox uses the host's network directly, with no proxy (process: no isolation).
	EgressHostNetwork EgressKind = iota
	// EgressUnixSocket: the proxy listens on a Unix socket of this host bound into the sandbox (host.Kit).
	EgressUnixSocket
	// EgressTCP: the sandbox reaches its proxy over TCP, from another machine: the backend serves the proxy on
	// a TCP port of its own per sandbox (internal/sandbox/kubernetes; the host kit's listener is a Unix socket
	// only, and the Pool stages no listener itself: it only builds the Recipe's Egress).
	EgressTCP
)

// Local are the Capabilities of a backend whose isolated sandboxes run on this host (bwrap, oci, gvisor).
var Local = Capabilities{HostWorkspace: true, RootFS: RootFSHostDir, Egress: EgressUnixSocket}

// Tool is a built-in tool as the hands declare it and the model is offered it.
type Tool struct {
	Name        string
	Description string
	// InputSchema is the JSON Schema (an object schema) of the tool's input.
	InputSchema json.RawMessage
}

// Sandbox is one running sandbox.
type Sandbox interface {
	// Execute runs one of its provider's Tools with its JSON input; a bash call runs in the persistent shell
	// named shell (Call.Shell: "" is the default one). A tool-level failure (bad input, missing file, command
	// timeout, a shell past MaxShells) is a Result with IsError; an error return means the sandbox itself
	// failed (ErrSandboxDead).
	Execute(ctx context.Context, shell, name string, input json.RawMessage) (Result, error)
	// Close kills every process of the sandbox. The workspace stays. Idempotent.
	Close() error
}

// Result is a tool's output as the model sees it.
type Result struct {
	Content []apitype.ContentBlock
	IsError bool
	// Failure, on an error result, says when the sandbox's limits rather than the tool's input made it fail:
	// FailureTimeout (the command ran past its timeout) or FailureLimit (the kernel killed a process at the
	// memory limit). Empty otherwise.
	Failure string
}

// Text joins the result's text blocks.
func (r Result) Text() string {
	var b strings.Builder
	for _, c := range r.Content {
		if c.Type == apitype.ContentText {
			b.WriteString(c.Text)
		}
	}
	return b.String()
}

// Result failures.
const (
	FailureTimeout = "timeout"
	FailureLimit   = "limit_hit"
)

// Recipe is everything needed to (re)build a session's sandbox, wherever it runs: it names nothing of the host
// the Pool runs on (where the sandbox's files are on this host is HostDirs, apart).
type Recipe struct {
	SessionID   string
	Environment apitype.EnvConfig
	Resources   []apitype.Resource
	// Skills are the agent's skills, placed (by the Placer) read-only under SkillsMount/<name>.
	Skills []apitype.SkillRef
	Limits Limits
	// Egress is what the host adds to the sandbox's network beyond the environment's policy (PoolConfig.Egress
	// builds it before each provisioning); nil means the policy alone.
	Egress *Egress
}

// Where a session's files appear in its sandbox.
const (
	// UploadsMount holds the session's file resources (read-only; the API's default mount paths are here).
	UploadsMount = "/mnt/session/uploads"
	// OutputsMount is where the agent leaves files for the user: they are collected into the Files API with
	// the session as their scope, as the hosted service does.
	OutputsMount = "/mnt/session/outputs"
	// SkillsMount holds the agent's skills, one directory per skill named as its SKILL.md names it (read-only).
	SkillsMount = "/mnt/skills"
)

// HostDirs are where a session's sandbox has its files on the host the Pool runs on. The Pool fills only what
// its Provider's Capabilities use (Workspace and Session with HostWorkspace, RootFS with RootFSHostDir) and
// gives them to the Provider, the Placer and the Collector beside the Recipe; only the host kit
// (internal/sandbox/host) and the placement (internal/workspace) read them. Empty: none.
type HostDirs struct {
	// Workspace is the directory bound at /workspace; it survives re-provisioning.
	Workspace string
	// Session is the directory of the session's files: the isolating backends bind its uploads subdirectory
	// read-only at UploadsMount (file resources), its outputs subdirectory read-write at OutputsMount
	// (collected into the Files API), its skills subdirectory read-only at SkillsMount and each memory store's
	// directory under its memory subdirectory at the store's mount path (Recipe.MemoryDirs), read-only or not
	// as the resource's access says. Empty: none is bound. It survives re-provisioning, as the workspace does.
	Session string
	// RootFS is the directory of the read-only root filesystem the sandbox runs on: the environment's image
	// (a plain directory tree: the base with the environment's packages). The isolating backends bind its
	// top-level directories read-only in the sandbox (nothing of the host's /usr, libraries or /etc is then
	// visible, and nothing the sandbox writes reaches it); the sandbox's own /proc, /dev, /tmp, /workspace,
	// session mounts and agent are as without one. Empty: the host's /usr and a minimal copy of its /etc. The
	// process backend refuses one (ErrRootFSUnsupported).
	RootFS string
	// Image is, for a Provider with RootFSImageRef, the reference of the environment's image its runtime pulls
	// (PoolConfig.Images is an ImageRefs). Empty: the Provider's own image.
	Image string
}

// Skills is the directory bound at SkillsMount ("" without a Session directory).
func (d HostDirs) Skills() string { return d.sub("skills") }

// Uploads is the directory bound at UploadsMount ("" without a Session directory).
func (d HostDirs) Uploads() string { return d.sub("uploads") }

// Outputs is the directory bound at OutputsMount ("" without a Session directory).
func (d HostDirs) Outputs() string { return d.sub("outputs") }

// Memory is the directory that holds one directory per memory store of the session (MemoryDir.Name), each
// bound at its resource's mount path ("" without a Session directory).
func (d HostDirs) Memory() string { return d.sub("memory") }

// MemoryDir is where one memory_store resource of a recipe is, in the sandbox and under HostDirs.Memory.
type MemoryDir struct {
	Resource *apitype.Resource
	// Name is its directory under HostDirs.Memory: the slug of its mount path (apitype.MemoryMountPath).
	Name string
	// Target is its mount path in the sandbox, MemoryMount/<Name>.
	Target string
	// ReadOnly: the resource's access is read_only; the directory is the host's and bound read-only.
	ReadOnly bool
}

// MemoryDirs are the recipe's memory_store resources, each at its mount path (apitype.MemoryMountPath of its
// store's name when it has none), in the recipe's order. A resource whose mount path is not one directory
// directly under apitype.MemoryMount, whose directory another memory store already took, or whose store is
// already mounted, is left out, with the reason in the second result.
func (r *Recipe) MemoryDirs() ([]MemoryDir, []*ResourceError) {
	var dirs []MemoryDir
	var bad []*ResourceError
	taken := map[string]bool{}
	for i := range r.Resources {
		res := &r.Resources[i]
		if res.Type != apitype.ResourceMemoryStore {
			continue
		}
		target := res.MountPath
		if target == "" {
			target = apitype.MemoryMountPath(res.Name, res.MemoryStoreID)
		}
		name, ok := strings.CutPrefix(target, apitype.MemoryMount+"/")
		var err error
		switch {
		case !ok || name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\\\x00"):
			err = fmt.Errorf("mount path %q is not a directory directly under %s", target, apitype.MemoryMount)
		case taken[name]:
			err = fmt.Errorf("another memory store is already mounted at %s", target)
		case taken["\x00"+res.MemoryStoreID]:
			err = fmt.Errorf("memory store %s is already mounted elsewhere", res.MemoryStoreID)
		}
		if err != nil {
			bad = append(bad, &ResourceError{ResourceID: res.ID, Type: string(res.Type), MountPath: target, Err: err})
			continue
		}
		taken[name], taken["\x00"+res.MemoryStoreID] = true, true
		dirs = append(dirs, MemoryDir{Resource: res, Name: name, Target: target, ReadOnly: res.Access == apitype.AccessReadOnly})
	}
	return dirs, bad
}

func (d HostDirs) sub(name string) string {
	if d.Session == "" {
		return ""
	}
	return filepath.Join(d.Session, name)
}

// Egress is what the host adds to one sandbox's network beyond the environment's policy: services its proxy
// answers itself and credentials it injects on the way out. It is built per session outside the sandbox
// (internal/proxy); only Env and CACertPEM are visible inside the sandbox, and neither holds a secret.
type Egress struct {
	// AllowInternal are the host:port pairs the operator trusts although they are internal addresses
	// (corral serve --egress-allow-internal).
	AllowInternal []string
	// AllowHosts are hosts the sandbox may reach beyond its environment's allowed_hosts under limited
	// networking, with the same rules (the package registries of allow_package_managers: "pypi.org", or a
	// mirror's "host:port"; an internal one only if AllowInternal trusts it too). Unrestricted networking
	// ignores them.
	AllowHosts []string
	// RootCAs, if set, verify the upstream TLS of the connections the host makes for the sandbox (clones,
	// the git endpoint, intercepted HTTPS); nil means the system roots.
	RootCAs *x509.CertPool
	// Env is added to the environment of the sandbox's processes: credential placeholders and CA bundle
	// paths, never a secret.
	Env map[string]string
	// CACertPEM is the certificate (never the key) of the CA the proxy signs intercepted TLS with; the sandbox
	// trusts it.
	CACertPEM []byte
	// Local serves the requests the sandbox sends through its proxy to LocalHost (the git endpoint).
	Local http.Handler
	// Intercept, if set, decides which destinations the proxy terminates TLS for, to inject credentials.
	Intercept Interceptor
}

// LocalHost is the host name under which a sandbox reaches the services of its own proxy (Egress.Local).
const LocalHost = "corral.internal"

// GitPrefix is the path under LocalHost at which the git endpoint (internal/proxy) serves a session's
// repositories: the origin of the clone of repository resource id is LocalRemote(id).
const GitPrefix = "/git/"

// LocalRemote is the origin of a sandbox's clone of repository resource resourceID: the git endpoint, which
// adds the resource's token outside the sandbox.
func LocalRemote(resourceID string) string { return "http://" + LocalHost + GitPrefix + resourceID }

// Interceptor injects credentials into a sandbox's outgoing HTTP(S) requests, in the proxy outside it.
type Interceptor interface {
	// Intercepts reports whether requests to host:port are terminated in the proxy (TLS included) so that
	// they can be rewritten.
	Intercepts(host, port string) bool
	// Certificate returns the certificate the proxy presents to the sandbox for host, signed by the CA of
	// Egress.CACertPEM.
	Certificate(host string) (*tls.Certificate, error)
	// Rewrite replaces the placeholders of req (headed for req.URL.Host) with the credentials allowed there.
	Rewrite(req *http.Request) error
}

// EgressSource builds a session's Egress before each of its sandboxes is provisioned.
type EgressSource interface {
	Egress(ctx context.Context, r *Recipe) (*Egress, error)
}

// Limits bound a sandbox's resources.
type Limits struct {
	MemoryBytes    int64         // 0 = backend default
	Pids           int           // 0 = backend default
	CPUQuota       float64       // CPUs; 0 = unlimited
	CommandTimeout time.Duration // per tool call; 0 = default
	OutputBytes    int           // cap on a tool's output; 0 = default
	// TmpBytes and TmpInodes bound the sandbox's /tmp (a tmpfs, in the sandbox's memory); 0 = default.
	TmpBytes  int64
	TmpInodes int64
}

// Hands is what a brain calls to run a built-in tool for a session. *Pool implements it.
type Hands interface {
	// Tools are the built-in tools the hands run, in the order the model is offered them. The slice and its
	// schemas are shared: callers must not modify them.
	Tools() []Tool
	// Execute runs one call to one of the Tools in the session's sandbox.
	Execute(ctx context.Context, call *Call) (Result, error)
}

// Provisioner is implemented by hands that can provision a session's sandbox before any tool call (*Pool does).
// Only the coupled comparison mode of the brain (harness.Config.EagerHands) uses it: lazy hands are the rule.
type Provisioner interface {
	// Provision makes sure the session of call.Recipe has a ready sandbox, provisioning one (and reporting it
	// through call.OnProvision) if it has none. Name and Input of the call are ignored.
	Provision(ctx context.Context, call *Call) error
}

// Call is one tool call routed to a session's hands.
type Call struct {
	Recipe Recipe
	Name   string
	Input  json.RawMessage
	// Shell names the persistent shell a bash call runs in. The threads of a multi-agent session share the
	// session's sandbox and filesystem, each with its own shell (cwd, variables): the brain names the thread's
	// id. "" is the default shell (a session of one thread). A sandbox runs at most MaxShells shells; a name is
	// at most 128 letters, digits, '_', '-' and '.'.
	Shell string
	// OnProvision, if set, is called when a sandbox starts provisioning (done=false) and when provisioning ends
	// (done=true, with its duration and error), so the brain can put provisioning into the session's log.
	OnProvision func(p ProvisionReport)
}

// MaxShells is how many persistent shells (Call.Shell) one sandbox runs at a time, the default one included: a
// call naming one more gets an error result. A bash call with restart and no command ends its shell, and frees
// its place. (The in-sandbox agent's agent.MaxShells; the host kit's tests check that they agree.)
const MaxShells = 32

// ProvisionReport describes a provisioning attempt.
type ProvisionReport struct {
	Backend  string
	Done     bool
	Duration time.Duration
	Err      error
	// ResourceErrors (done=true only) are the session resources that could not be placed in the workspace
	// before this sandbox was provisioned. They do not fail provisioning: the sandbox runs without them, and the
	// session's next tool result starts with a note about them.
	ResourceErrors []*ResourceError
	// Image (start reports only) is the sandbox's image when it is still building as provisioning starts:
	// the provisioning waits for the build (the base's, on a first start, takes minutes).
	Image *apitype.EnvironmentImage
}

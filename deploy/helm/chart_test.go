// Package helm_test checks the Helm chart under corral/ with the real helm: it lints, renders and refuses, and
// the rendered objects hold what docs/kubernetes.md promises.
package helm_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// helmBin is CORRAL_HELM, else helm on PATH. Without one the tests skip, or fail when CORRAL_REQUIRE_HELM is set
// (CI).
func helmBin(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("CORRAL_HELM")
	if bin == "" {
		bin = "helm"
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		if os.Getenv("CORRAL_REQUIRE_HELM") != "" {
			t.Fatalf("helm required by CORRAL_REQUIRE_HELM but not found: %v", err)
		}
		t.Skipf("helm not found (set CORRAL_HELM): %v", err)
	}
	return path
}

const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// required are the values without which the chart refuses to render.
var required = []string{
	"image.repository=registry.example.com/corral",
	"image.digest=" + digest,
	"database.existingSecret=corral-db",
	"vault.existingSecret=corral-vault",
	"apiKey.existingSecret=corral-api-key",
	"proxy.existingSecret=corral-proxy",
}

func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(helmBin(t), args...)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("helm %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return out.String(), nil
}

func sets(values ...string) []string {
	var args []string
	for _, v := range values {
		args = append(args, "--set", v)
	}
	return args
}

// render runs helm template with the required values and more, and returns the objects by "Kind/name".
func render(t *testing.T, more ...string) map[string]map[string]any {
	t.Helper()
	out, err := helm(t, append([]string{"template", "rel", "corral"}, sets(append(slices.Clone(required), more...)...)...)...)
	if err != nil {
		t.Fatal(err)
	}
	objs := map[string]map[string]any{}
	dec := yaml.NewDecoder(strings.NewReader(out))
	for {
		var o map[string]any
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatalf("rendered YAML: %v\n%s", err, out)
		}
		if o == nil {
			continue
		}
		objs[fmt.Sprintf("%s/%s", o["kind"], get(o, "metadata", "name"))] = o
	}
}

// get walks maps by key and lists by index (an int).
func get(o any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := o.(map[string]any)
			if !ok {
				return nil
			}
			o = m[k]
		case int:
			l, ok := o.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			o = l[k]
		}
	}
	return o
}

func container(o map[string]any) map[string]any {
	c, _ := get(o, "spec", "template", "spec", "containers", 0).(map[string]any)
	return c
}

func TestLint(t *testing.T) {
	if out, err := helm(t, append([]string{"lint", "--strict", "corral"}, sets(required...)...)...); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

func TestRefusesWithoutRequiredValues(t *testing.T) {
	for i, v := range required {
		if i == 1 { // the digest is optional (the tag is the default)
			continue
		}
		rest := slices.Delete(slices.Clone(required), i, i+1)
		_, err := helm(t, append([]string{"template", "rel", "corral"}, sets(rest...)...)...)
		key, _, _ := strings.Cut(v, "=")
		if err == nil || !strings.Contains(err.Error(), key+" is required") {
			t.Errorf("without %s: %v, want a refusal naming it", key, err)
		}
	}
	_, err := helm(t, append([]string{"template", "rel", "corral"}, sets(append(slices.Clone(required), "worker.enabled=true")...)...)...)
	if err == nil || !strings.Contains(err.Error(), "worker.environment is required") {
		t.Errorf("a worker without its environment: %v, want a refusal", err)
	}
}

func TestRender(t *testing.T) {
	objs := render(t, "harness.replicas=3", "model.existingSecret=corral-model",
		"worker.enabled=true", "worker.environment=env_123", "worker.existingSecret=corral-env-key")
	for _, want := range []string{"Deployment/rel-corral-api", "Service/rel-corral-api", "Deployment/rel-corral-harness",
		"Deployment/rel-corral-proxy", "Service/rel-corral-proxy", "Deployment/rel-corral-worker"} {
		if objs[want] == nil {
			t.Errorf("no %s among %v", want, slices.Sorted(maps.Keys(objs)))
		}
	}
	if t.Failed() {
		return
	}
	api, harness, proxy, worker := objs["Deployment/rel-corral-api"], objs["Deployment/rel-corral-harness"], objs["Deployment/rel-corral-proxy"], objs["Deployment/rel-corral-worker"]

	args := func(o map[string]any) []string {
		var out []string
		for _, a := range get(container(o), "args").([]any) {
			out = append(out, a.(string))
		}
		return out
	}
	if a := args(api); a[0] != "serve" || !slices.Contains(a, "--brains=0") {
		t.Errorf("api args %q, want serve --brains=0", a)
	}
	if a := args(harness); a[0] != "harness" || !slices.Contains(a, "--mcp-proxy=http://rel-corral-proxy:7431") {
		t.Errorf("harness args %q, want harness with the proxy's Service", a)
	}
	if a := args(proxy); a[0] != "proxy" || !slices.Contains(a, "--listen=0.0.0.0:7431") {
		t.Errorf("proxy args %q", a)
	}
	if n := get(harness, "spec", "replicas"); n != 3 {
		t.Errorf("harness replicas %v, want 3", n)
	}

	for name, o := range map[string]map[string]any{"api": api, "harness": harness, "proxy": proxy, "worker": worker} {
		c := container(o)
		if img := get(c, "image"); img != "registry.example.com/corral@"+digest {
			t.Errorf("%s image %v, want the digest", name, img)
		}
		if g := get(o, "spec", "template", "spec", "terminationGracePeriodSeconds"); g != 60 {
			t.Errorf("%s terminationGracePeriodSeconds %v", name, g)
		}
		if a := get(o, "spec", "template", "spec", "automountServiceAccountToken"); a != false {
			t.Errorf("%s mounts a service account token (%v): no process needs the Kubernetes API", name, a)
		}
		// Secrets are referenced, never inlined: no env var holds a value for a secret's name.
		for _, e := range get(c, "env").([]any) {
			n, _ := get(e, "name").(string)
			secret := n == "CORRAL_DB" || n == "CORRAL_VAULT_KEY" || n == "CORRAL_API_KEY" || n == "CORRAL_ENV_KEY" || n == "CORRAL_PROXY_TOKEN"
			if secret && (get(e, "value") != nil || get(e, "valueFrom", "secretKeyRef", "name") == nil) {
				t.Errorf("%s env %s is not from a Secret: %v", name, n, e)
			}
		}
	}
	secretOf := func(o map[string]any, env string) any {
		for _, e := range get(container(o), "env").([]any) {
			if get(e, "name") == env {
				return get(e, "valueFrom", "secretKeyRef", "name")
			}
		}
		return nil
	}
	for name, o := range map[string]map[string]any{"api": api, "harness": harness, "proxy": proxy} {
		if s := secretOf(o, "CORRAL_DB"); s != "corral-db" {
			t.Errorf("%s CORRAL_DB from %v, want the Secret corral-db", name, s)
		}
		if s := secretOf(o, "CORRAL_VAULT_KEY"); s != "corral-vault" {
			t.Errorf("%s CORRAL_VAULT_KEY from %v, want the Secret corral-vault", name, s)
		}
	}
	if s := secretOf(api, "CORRAL_API_KEY"); s != "corral-api-key" {
		t.Errorf("api CORRAL_API_KEY from %v", s)
	}
	// The brains authenticate to the MCP proxy with the token both take from its Secret (corral proxy and
	// harness --mcp-proxy refuse to start without one).
	for name, o := range map[string]map[string]any{"harness": harness, "proxy": proxy} {
		if s := secretOf(o, "CORRAL_PROXY_TOKEN"); s != "corral-proxy" {
			t.Errorf("%s CORRAL_PROXY_TOKEN from %v, want the Secret corral-proxy", name, s)
		}
	}
	if s := secretOf(api, "CORRAL_PROXY_TOKEN"); s != nil {
		t.Errorf("the API gets the proxy's token (%v)", s)
	}
	if s := secretOf(worker, "CORRAL_ENV_KEY"); s != "corral-env-key" {
		t.Errorf("worker CORRAL_ENV_KEY from %v", s)
	}
	if s, v := secretOf(worker, "CORRAL_DB"), secretOf(worker, "CORRAL_VAULT_KEY"); s != nil || v != nil {
		t.Errorf("the worker gets the database (%v) or the vault key (%v): it talks to the API only", s, v)
	}
	if s := get(container(harness), "envFrom", 0, "secretRef", "name"); s != "corral-model" {
		t.Errorf("harness model credentials from %v", s)
	}
	if get(container(api), "envFrom") != nil {
		t.Errorf("the API gets the model's credentials: only the brains call the model")
	}

	// Probes: the API's health check, the harness's metrics, the proxy's port.
	if p := get(container(api), "readinessProbe", "httpGet", "path"); p != "/healthz" {
		t.Errorf("api readiness probe %v", p)
	}
	if p := get(container(api), "livenessProbe", "httpGet", "path"); p != "/healthz" {
		t.Errorf("api liveness probe %v", p)
	}
	if p := get(container(harness), "livenessProbe", "httpGet", "port"); p != "metrics" {
		t.Errorf("harness liveness probe port %v", p)
	}
	if p := get(container(proxy), "readinessProbe", "tcpSocket", "port"); p != "mcp" {
		t.Errorf("proxy readiness probe %v", p)
	}

	// Prometheus scrapes the processes that serve metrics, on the port they serve them on.
	for name, o := range map[string]map[string]any{"api": api, "harness": harness} {
		ann := get(o, "spec", "template", "metadata", "annotations")
		if get(ann, "prometheus.io/scrape") != "true" || get(ann, "prometheus.io/port") != "9464" {
			t.Errorf("%s annotations %v", name, ann)
		}
		if !slices.ContainsFunc(args(o), func(a string) bool { return a == "--metrics-listen=0.0.0.0:9464" }) {
			t.Errorf("%s does not serve metrics on the annotated port: %q", name, args(o))
		}
	}

	// Every process is restricted by default; a harness or worker is privileged only when asked, to run sandboxes
	// in its pod from an image of its own.
	for name, o := range map[string]map[string]any{"api": api, "harness": harness, "proxy": proxy, "worker": worker} {
		checkRestricted(t, name, get(container(o), "securityContext"))
	}
	sandboxing := render(t, "harness.privileged=true", "harness.image=registry.example.com/corral-bwrap:v1")
	if h := container(sandboxing["Deployment/rel-corral-harness"]); get(h, "securityContext", "privileged") != true ||
		get(h, "image") != "registry.example.com/corral-bwrap:v1" {
		t.Errorf("harness.privileged and harness.image: security context %v, image %v", get(h, "securityContext"), get(h, "image"))
	}
	if get(container(sandboxing["Deployment/rel-corral-api"]), "image") != "registry.example.com/corral@"+digest {
		t.Errorf("harness.image changed the API's image")
	}
	if sandboxing["Deployment/rel-corral-worker"] != nil {
		t.Errorf("workers rendered without worker.enabled")
	}
	if off := render(t, "proxy.enabled=false"); off["Deployment/rel-corral-proxy"] != nil ||
		slices.ContainsFunc(args(off["Deployment/rel-corral-harness"]), func(a string) bool { return strings.HasPrefix(a, "--mcp-proxy") }) {
		t.Errorf("proxy.enabled=false still renders the proxy or points the harness at it")
	}
}

func checkRestricted(t *testing.T, name string, sc any) {
	t.Helper()
	if get(sc, "runAsNonRoot") != true || get(sc, "readOnlyRootFilesystem") != true || get(sc, "allowPrivilegeEscalation") != false ||
		get(sc, "seccompProfile", "type") != "RuntimeDefault" || get(sc, "capabilities", "drop", 0) != "ALL" || get(sc, "privileged") != nil {
		t.Errorf("%s security context is not restricted: %v", name, sc)
	}
}

// TestRenderKubernetes: with the kubernetes sandbox backend, the brains get a ServiceAccount (its token
// mounted, for the cluster's API) bound to a Role in the sandboxes' namespace that grants what the backend uses
// and nothing else (no secrets), the backend's flags, their address and their name; the other components
// still mount no token.
func TestRenderKubernetes(t *testing.T) {
	if _, err := helm(t, append([]string{"template", "rel", "corral"}, sets(append(slices.Clone(required), "harness.sandbox=kubernetes")...)...)...); err == nil ||
		!strings.Contains(err.Error(), "harness.kubernetes.image is required") {
		t.Errorf("no sandbox image: %v; want a refusal naming harness.kubernetes.image", err)
	}
	objs := render(t, "harness.sandbox=kubernetes", "harness.kubernetes.image=registry.example.com/sandbox:1",
		"harness.kubernetes.namespace=sandboxes", "harness.kubernetes.runtimeClassName=gvisor")
	harness := objs["Deployment/rel-corral-harness"]
	role, binding := objs["Role/rel-corral-harness-sandboxes"], objs["RoleBinding/rel-corral-harness-sandboxes"]
	if harness == nil || role == nil || binding == nil || objs["ServiceAccount/rel-corral-harness"] == nil {
		t.Fatalf("objects: %v", slices.Sorted(maps.Keys(objs)))
	}
	spec := get(harness, "spec", "template", "spec")
	if get(spec, "serviceAccountName") != "rel-corral-harness" || get(spec, "automountServiceAccountToken") != true {
		t.Errorf("harness account: %v, token %v", get(spec, "serviceAccountName"), get(spec, "automountServiceAccountToken"))
	}
	var args []string
	for _, a := range get(container(harness), "args").([]any) {
		args = append(args, a.(string))
	}
	for _, want := range []string{"--sandbox=kubernetes", "--k8s-namespace=sandboxes", "--k8s-image=registry.example.com/sandbox:1",
		"--k8s-agent-image=registry.example.com/corral@" + digest, "--k8s-runtime-class=gvisor"} {
		if !slices.Contains(args, want) {
			t.Errorf("harness args %q lack %s", args, want)
		}
	}
	env := map[string]any{}
	for _, e := range get(container(harness), "env").([]any) {
		env[get(e, "name").(string)] = get(e, "valueFrom", "fieldRef", "fieldPath")
	}
	if env["POD_IP"] != "status.podIP" || env["CORRAL_K8S_OWNER"] != "metadata.name" {
		t.Errorf("harness env: %v", env)
	}
	if get(role, "metadata", "namespace") != "sandboxes" || get(binding, "metadata", "namespace") != "sandboxes" {
		t.Errorf("the role is not in the sandboxes' namespace: %v", get(role, "metadata"))
	}
	granted := map[string]bool{}
	for _, r := range get(role, "rules").([]any) {
		for _, res := range get(r, "resources").([]any) {
			granted[res.(string)] = true
		}
	}
	for _, want := range []string{"pods", "pods/attach", "configmaps", "networkpolicies"} {
		if !granted[want] {
			t.Errorf("the role does not grant %s", want)
		}
	}
	if granted["secrets"] || granted["pods/exec"] || len(granted) != 4 {
		t.Errorf("the role grants %v; want exactly pods, pods/attach, configmaps, networkpolicies", slices.Sorted(maps.Keys(granted)))
	}
	// With a workspace class: the claims too, and the flags.
	objs = render(t, "harness.sandbox=kubernetes", "harness.kubernetes.image=registry.example.com/sandbox:1",
		"harness.kubernetes.workspaceClass=fast", "harness.kubernetes.podPidsLimit=1024")
	args = nil
	for _, a := range get(container(objs["Deployment/rel-corral-harness"]), "args").([]any) {
		args = append(args, a.(string))
	}
	if !slices.Contains(args, "--k8s-workspace-class=fast") || !slices.Contains(args, "--k8s-pod-pids-limit=1024") {
		t.Errorf("harness args %q lack the workspace class or the pids limit", args)
	}
	var claims []any
	for _, r := range get(objs["Role/rel-corral-harness-sandboxes"], "rules").([]any) {
		if slices.Contains(get(r, "resources").([]any), any("persistentvolumeclaims")) {
			claims = get(r, "verbs").([]any)
		}
	}
	if !slices.Equal(claims, []any{"create", "list", "delete"}) {
		t.Errorf("with a workspace class the role grants %v on claims; want create, list, delete", claims)
	}
	// And get on that one StorageClass (cluster-scoped), for the check at the backend's start: nothing else.
	cr, crb := objs["ClusterRole/default-rel-corral-harness-workspace-class"], objs["ClusterRoleBinding/default-rel-corral-harness-workspace-class"]
	if cr == nil || crb == nil {
		t.Fatalf("with a workspace class: no ClusterRole and binding for it: %v", slices.Sorted(maps.Keys(objs)))
	}
	if rules := get(cr, "rules").([]any); len(rules) != 1 || !slices.Equal(get(rules[0], "resources").([]any), []any{"storageclasses"}) ||
		!slices.Equal(get(rules[0], "resourceNames").([]any), []any{"fast"}) || !slices.Equal(get(rules[0], "verbs").([]any), []any{"get"}) {
		t.Errorf("the cluster role grants %v; want get on storageclasses/fast alone", rules)
	}
	if s := get(crb, "subjects").([]any); len(s) != 1 || get(s[0], "name") != "rel-corral-harness" || get(crb, "roleRef", "name") != "default-rel-corral-harness-workspace-class" {
		t.Errorf("the cluster role binding: %v", crb)
	}
	if without := render(t, "harness.sandbox=kubernetes", "harness.kubernetes.image=registry.example.com/sandbox:1"); without["ClusterRole/default-rel-corral-harness-workspace-class"] != nil {
		t.Error("a cluster role without a workspace class")
	}
	for _, name := range []string{"api", "proxy"} {
		if get(objs["Deployment/rel-corral-"+name], "spec", "template", "spec", "automountServiceAccountToken") != false {
			t.Errorf("%s mounts a service account token", name)
		}
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/client"
	"github.com/corralhq/corral/internal/model/modeltest"
)

func TestCLI(t *testing.T) {
	t.Parallel()
	model := modeltest.NewServer(t)
	model.Script(modeltest.Turn{Text: "Hello from the model."})
	s := startServer(t, t.TempDir(), model)

	conn := []string{"--url", s.url, "--key", testKey}
	cli := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if code := run(ctx, &stdio{out: &out, err: &errb}, append(args, conn...)); code != 0 {
			t.Fatalf("corral %s: exit %d: %s", strings.Join(args, " "), code, errb.String())
		}
		return out.String()
	}

	var agent, env, sess struct{ ID string }
	if err := json.Unmarshal([]byte(cli("agents", "create", "--name", "cli", "--system", "Be brief.")), &agent); err != nil || agent.ID == "" {
		t.Fatalf("agents create: %v %+v", err, agent)
	}
	if err := json.Unmarshal([]byte(cli("envs", "create", "--name", "cli")), &env); err != nil || env.ID == "" {
		t.Fatalf("envs create: %v", err)
	}
	if out := cli("agents", "list"); !strings.Contains(out, agent.ID) || !strings.Contains(out, "cli") {
		t.Errorf("agents list lacks the agent:\n%s", out)
	}
	if err := json.Unmarshal([]byte(cli("sessions", "create", "--agent", agent.ID, "--env", env.ID, "--message", "Say hello.")), &sess); err != nil || sess.ID == "" {
		t.Fatalf("sessions create: %v", err)
	}
	tail := cli("tail", sess.ID, "--until-idle")
	for _, want := range []string{"user.message", "Say hello.", "agent.message", "Hello from the model.", "session.status_idle", "end_turn"} {
		if !strings.Contains(tail, want) {
			t.Errorf("tail output lacks %q:\n%s", want, tail)
		}
	}
	if out := cli("sessions", "get", sess.ID); !strings.Contains(out, `"status": "idle"`) {
		t.Errorf("sessions get:\n%s", out)
	}

	// Errors come back in the API's words, with a non-zero exit.
	var errb bytes.Buffer
	if code := run(context.Background(), &stdio{out: &bytes.Buffer{}, err: &errb}, append([]string{"sessions", "get", "sesn_missing"}, conn...)); code == 0 || !strings.Contains(errb.String(), "not_found_error") {
		t.Errorf("sessions get of a missing id: exit %d, %q", code, errb.String())
	}
	if code := run(context.Background(), &stdio{out: &bytes.Buffer{}, err: &errb}, []string{"agents", "bogus"}); code == 0 {
		t.Errorf("unknown subcommand exited 0")
	}
}

// TestKeys: with no CORRAL_API_KEY, the first start mints a key and prints it once; `corral keys` manages more
// in the store, and a revoked key is refused.
func TestKeys(t *testing.T) {
	t.Parallel()
	model := modeltest.NewServer(t)
	data := t.TempDir()
	args := []string{"serve", "--listen", "127.0.0.1:0", "--data", data, "--sandbox", "none"}
	s := startCorral(t, serverEnv(model, ""), "corral: listening on ", args...)
	printed := regexp.MustCompile(`created API key (apikey_\w+)`).FindStringSubmatch(s.stderr.String())
	// stdout and stderr are separate pipes: the key may arrive a moment after the listening line.
	for deadline := time.Now().Add(5 * time.Second); s.stdout.String() == "" && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	first := strings.TrimSpace(s.stdout.String())
	if printed == nil || !regexp.MustCompile(`^corral-\w{40}$`).MatchString(first) {
		t.Fatalf("first start printed no key: stdout %q, stderr:\n%s", first, s.stderr.String())
	}
	if strings.Contains(s.stderr.String(), first) {
		t.Error("the key secret was written to the log (stderr)")
	}
	if !strings.Contains(s.stderr.String(), "corral: data in "+data+" ") {
		t.Errorf("serve does not say where its data is:\n%s", s.stderr.String())
	}
	ctx := context.Background()
	get := func(key string) error {
		c, err := client.New(client.Config{BaseURL: s.url, APIKey: key})
		if err != nil {
			return err
		}
		_, err = c.AgentList(ctx, nil)
		return err
	}
	if err := get(first); err != nil {
		t.Fatalf("the printed key is refused: %v", err)
	}

	cli := func(args ...string) (string, int) {
		var out, errb bytes.Buffer
		code := run(ctx, &stdio{out: &out, err: &errb}, append(args, "--data", data))
		return out.String() + errb.String(), code
	}
	out, code := cli("keys", "create", "--name", "ci")
	fields := strings.Fields(out)
	if code != 0 || len(fields) < 2 || !strings.HasPrefix(fields[0], "apikey_") {
		t.Fatalf("keys create: exit %d: %s", code, out)
	}
	secondID, second := fields[0], fields[1]
	if err := get(second); err != nil {
		t.Fatalf("a created key is refused: %v", err)
	}
	if out, _ := cli("keys", "list"); !strings.Contains(out, secondID) || !strings.Contains(out, printed[1]) || strings.Contains(out, second) {
		t.Errorf("keys list must show both ids and no secret:\n%s", out)
	}
	if out, code := cli("keys", "revoke", secondID); code != 0 {
		t.Fatalf("keys revoke: exit %d: %s", code, out)
	}
	var apiErr *client.Error
	if err := get(second); !errors.As(err, &apiErr) || apiErr.Status != http.StatusUnauthorized {
		t.Errorf("revoked key: got %v, want 401", err)
	}
	if err := get("corral-not-a-key"); !errors.As(err, &apiErr) || apiErr.Type != "authentication_error" {
		t.Errorf("unknown key: got %v, want authentication_error", err)
	}

	// The first key is an organization admin key: it makes a workspace, and keys create --workspace a key of it,
	// which acts there and is refused the admin API.
	admin := func(key, method, path, body string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, method, s.url+path, strings.NewReader(body))
		req.Header.Set("x-api-key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := admin(first, "POST", "/v1/organizations/workspaces", `{"name":"team"}`)
	ws := regexp.MustCompile(`"id":"(wrkspc_\w+)"`).FindStringSubmatch(body)
	if code != http.StatusOK || ws == nil {
		t.Fatalf("create a workspace with the first key: %d %s", code, body)
	}
	if out, code := cli("keys", "create", "--workspace", "wrkspc_none"); code == 0 || !strings.Contains(out, "no workspace wrkspc_none") {
		t.Errorf("keys create in no workspace: exit %d: %s", code, out)
	}
	out, code = cli("keys", "create", "--name", "team key", "--workspace", ws[1])
	if fields = strings.Fields(out); code != 0 || len(fields) < 2 {
		t.Fatalf("keys create --workspace: exit %d: %s", code, out)
	}
	teamID, team := fields[0], fields[1]
	if err := get(team); err != nil {
		t.Errorf("the workspace's key is refused: %v", err)
	}
	if code, body := admin(team, "GET", "/v1/organizations/workspaces", ""); code != http.StatusForbidden {
		t.Errorf("the workspace's key on the admin API: %d %s, want 403", code, body)
	}
	list, _ := cli("keys", "list")
	if !regexp.MustCompile(teamID+`\s+team key\s+`+ws[1]+`\s`).MatchString(list) ||
		!regexp.MustCompile(printed[1]+`\s+initial\s+\(organization admin\)`).MatchString(list) {
		t.Errorf("keys list must show each key's workspace:\n%s", list)
	}

	// A restart with keys in the store mints none.
	s.cmd.Process.Kill()
	<-s.exited
	s2 := startCorral(t, serverEnv(model, ""), "corral: listening on ", args...)
	if strings.Contains(s2.stderr.String(), "created API key") || s2.stdout.String() != "" {
		t.Errorf("second start minted another key:\n%s", s2.stderr.String())
	}
	// It says how to get a key instead.
	if !strings.Contains(s2.stderr.String(), "2 API key(s) in the store") || !strings.Contains(s2.stderr.String(), "corral keys create --data "+data) {
		t.Errorf("second start gives no hint about keys:\n%s", s2.stderr.String())
	}
}

// TestHelp: every way of asking for help prints it to stdout and exits 0, for the binary, every command, every
// group and every group's commands; wrong arguments still print usage to stderr and fail.
func TestHelp(t *testing.T) {
	t.Parallel()
	call := func(args ...string) (stdout, stderr string, code int) {
		var out, errb bytes.Buffer
		code = run(context.Background(), &stdio{out: &out, err: &errb}, args)
		return out.String(), errb.String(), code
	}
	wantHelp := func(want string, args ...string) {
		t.Helper()
		out, errs, code := call(args...)
		if code != 0 || !strings.Contains(out, want) || errs != "" {
			t.Errorf("corral %s: exit %d, stdout %q, stderr %q; want exit 0 and %q on stdout only", strings.Join(args, " "), code, out, errs, want)
		}
	}
	for _, h := range []string{"-h", "--help", "help"} {
		wantHelp("Usage: corral <command>", h)
	}
	groups := map[string][]string{
		"agents":   {"create", "get", "list"},
		"envs":     {"create", "get", "list", "delete"},
		"sessions": {"create", "get", "list"},
		"keys":     {"create", "list", "revoke"},
	}
	for name := range commands {
		wantHelp("Usage: corral "+name, name, "-h")
		wantHelp("Usage: corral "+name, name, "--help")
		wantHelp("Usage: corral "+name, "help", name)
		verbs, group := groups[name]
		if !group {
			continue
		}
		wantHelp("Usage: corral "+name, name, "help")
		out, _, _ := call(name, "-h")
		for _, v := range verbs {
			if !strings.Contains(out, "  "+v+" ") {
				t.Errorf("corral %s -h does not list %s:\n%s", name, v, out)
			}
			wantHelp("Usage: corral "+name+" "+v, name, v, "-h")
			wantHelp("Usage: corral "+name+" "+v, name, v, "--help")
			wantHelp("Usage: corral "+name+" "+v, name, "help", v)
		}
	}
	for _, g := range []string{"agents", "envs", "sessions", "keys"} {
		if _, ok := commands[g]; !ok {
			t.Errorf("group %s is not registered", g)
		}
	}
	// Wrong arguments are reported on stderr (with the usage where it helps), with a failing exit.
	for _, args := range [][]string{{}, {"agents"}, {"agents", "bogus"}, {"bogus"}, {"agents", "create"}, {"tail"}, {"agents", "create", "--bogus"}} {
		out, errs, code := call(args...)
		if code == 0 || out != "" || errs == "" {
			t.Errorf("corral %s: exit %d, stdout %q, stderr %q; want a failure reported on stderr only", strings.Join(args, " "), code, out, errs)
		}
	}
}

// TestKeysRefuseToCreateStore: keys run where there is no store fail, say where they looked, and create
// nothing.
func TestKeysRefuseToCreateStore(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"keys", "list"}, {"keys", "create", "--name", "x"}, {"keys", "revoke", "apikey_x"}} {
		dir := filepath.Join(t.TempDir(), "corral-data")
		var out, errb bytes.Buffer
		code := run(context.Background(), &stdio{out: &out, err: &errb}, append(args, "--data", dir))
		want := filepath.Join(dir, "corral.db")
		if code == 0 || !strings.Contains(errb.String(), "no store at "+want) {
			t.Errorf("corral %s: exit %d, stderr %q; want a failure naming %s", strings.Join(args, " "), code, errb.String(), want)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("corral %s created %s (%v)", strings.Join(args, " "), dir, err)
		}
	}
	db := filepath.Join(t.TempDir(), "other.db")
	var errb bytes.Buffer
	if code := run(context.Background(), &stdio{out: io.Discard, err: &errb}, []string{"keys", "list", "--db", "sqlite://" + db}); code == 0 ||
		!strings.Contains(errb.String(), db) {
		t.Errorf("keys list --db: exit %d, stderr %q", code, errb.String())
	}
	if _, err := os.Stat(db); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("keys list --db created %s", db)
	}
}

// TestTailAndQuiet: create commands print only the id with -q; tail --until-idle exits at once for a turn that
// ended before it connected (with and without history), follows a session whose log was empty when it
// started, and prints tool input as the model wrote it.
func TestTailAndQuiet(t *testing.T) {
	t.Parallel()
	const command = `echo "a" > b.txt && cat b.txt <x>`
	model := modeltest.NewServer(t)
	model.Script(
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{Name: "bash", Input: `{"command":` + strconv.Quote(command) + `}`}}},
		modeltest.Turn{Text: "Done."},
		modeltest.Turn{Text: "Second turn."},
	)
	s := startServer(t, t.TempDir(), model)
	conn := []string{"--url", s.url, "--key", testKey}
	cli := func(ctx context.Context, args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := run(ctx, &stdio{out: &out, err: &errb}, append(args, conn...)); code != 0 {
			t.Fatalf("corral %s: exit %d: %s", strings.Join(args, " "), code, errb.String())
		}
		return out.String()
	}
	bg := context.Background()
	id := func(out, prefix string) string {
		t.Helper()
		if !regexp.MustCompile(`^` + prefix + `\w+\n$`).MatchString(out) {
			t.Fatalf("-q printed %q, want only a %s id", out, prefix)
		}
		return strings.TrimSpace(out)
	}
	agent := id(cli(bg, "agents", "create", "--name", "tail", "-q"), apitype.PrefixAgent)
	env := id(cli(bg, "envs", "create", "--name", "tail", "--quiet"), apitype.PrefixEnvironment)
	sess := id(cli(bg, "sessions", "create", "--agent", agent, "--env", env, "--message", "Run it.", "-q"), apitype.PrefixSession)
	waitIdle(t, s.client(), sess)

	// The turn is over: tail must not wait for another.
	for _, args := range [][]string{{"tail", sess, "--until-idle"}, {"tail", sess, "--until-idle", "--history=false"}, {"tail", sess, "--until-idle", "--json"}} {
		ctx, cancel := context.WithTimeout(bg, 10*time.Second)
		out := cli(ctx, args...)
		if ctx.Err() != nil {
			t.Errorf("corral %s did not exit on its own after the turn ended", strings.Join(args, " "))
		}
		cancel()
		switch {
		case slices.Contains(args, "--json"):
			if !strings.Contains(out, `"command":`+strconv.Quote(command)) {
				t.Errorf("tail --json does not show the tool input as written:\n%s", out)
			}
		case slices.Contains(args, "--history=false"):
			if out != "" {
				t.Errorf("tail --history=false printed old events:\n%s", out)
			}
		default:
			if !strings.Contains(out, "bash "+`{"command":"echo \"a\" > b.txt && cat b.txt <x>"}`) || strings.Contains(out, `\u00`) {
				t.Errorf("tail does not show the tool input as written:\n%s", out)
			}
		}
	}

	// A session whose log is empty when tail starts: what is sent afterwards is followed to the end of its turn.
	empty := id(cli(bg, "sessions", "create", "--agent", agent, "--env", env, "-q"), apitype.PrefixSession)
	done := make(chan string, 1)
	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	go func() {
		var out, errb bytes.Buffer
		run(ctx, &stdio{out: &out, err: &errb}, append([]string{"tail", empty, "--until-idle"}, conn...))
		done <- out.String() + errb.String()
	}()
	cli(bg, "send", empty, "Again.")
	out := <-done
	if ctx.Err() != nil || !strings.Contains(out, "Second turn.") || !strings.Contains(out, "end_turn") {
		t.Errorf("tail of a session that started empty (timed out: %v):\n%s", ctx.Err() != nil, out)
	}
}

func TestUnescapeHTML(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		`{"command":"a \u003e b \u0026\u0026 c \u003cd\u003E"}`: `{"command":"a > b && c <d>"}`,
		`{"s":"\\u003c stays escaped"}`:                         `{"s":"\\u003c stays escaped"}`,
		`{"s":"\\\u003c"}`:                                      `{"s":"\\<"}`,
		`{"s":"\u00e9 \n \" \\"}`:                               `{"s":"\u00e9 \n \" \\"}`,
		`"tail \`:                                               `"tail \`,
	} {
		got := string(unescapeHTML([]byte(in)))
		if got != want {
			t.Errorf("unescapeHTML(%s) = %s, want %s", in, got, want)
		}
		var a, b any
		if json.Valid([]byte(in)) && (json.Unmarshal([]byte(in), &a) != nil || json.Unmarshal([]byte(got), &b) != nil || !reflect.DeepEqual(a, b)) {
			t.Errorf("unescapeHTML(%s) changed the JSON value: %v vs %v", in, a, b)
		}
	}
}

// TestHelpHidesSecrets: the help of every command and verb of the real binary, run with secrets in the
// environment that feeds flag defaults, prints none of them (it may say that they are set).
func TestHelpHidesSecrets(t *testing.T) {
	t.Parallel()
	secrets := map[string]string{
		"CORRAL_API_KEY":        "corral-marker-apikey",
		"CORRAL_ENV_KEY":        "marker-envkey",
		"CORRAL_VAULT_KEY":      "marker-vaultkey",
		"CORRAL_DB":             "postgres://corral:marker-dbpass@127.0.0.1:1/db?password=marker-dbquery",
		"CORRAL_URL":            "http://user:marker-urlpass@127.0.0.1:1",
		"ANTHROPIC_API_KEY":     "marker-anthropic",
		"ANTHROPIC_AUTH_TOKEN":  "marker-anthropic-token",
		"OPENAI_API_KEY":        "marker-openai",
		"AWS_SECRET_ACCESS_KEY": "marker-aws",
	}
	env := os.Environ()
	for k, v := range secrets {
		env = append(env, k+"="+v)
	}
	corral := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(filepath.Join(binDir, "corral"), args...)
		cmd.Env = env
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Errorf("corral %s: %v\n%s", strings.Join(args, " "), err, out.String())
		}
		return out.String()
	}
	check := func(out string, args ...string) {
		t.Helper()
		for name, v := range secrets {
			for _, part := range []string{v, "marker-"} {
				if strings.Contains(out, part) {
					t.Errorf("corral %s prints the secret of $%s (%q):\n%s", strings.Join(args, " "), name, part, out)
				}
			}
		}
	}
	verbLine := regexp.MustCompile(`(?m)^  ([a-z-]+) `)
	helped := 0
	for name := range commands {
		out := corral(name, "-h")
		check(out, name, "-h")
		helped++
		if !strings.Contains(out, "Commands:") {
			continue
		}
		for _, m := range verbLine.FindAllStringSubmatch(out, -1) {
			check(corral(name, m[1], "-h"), name, m[1], "-h")
			helped++
		}
	}
	if helped < 20 {
		t.Errorf("only %d helps checked", helped)
	}
	// The help says where the key comes from.
	if out := corral("agents", "list", "-h"); !strings.Contains(out, "set from $CORRAL_API_KEY") {
		t.Errorf("agents list -h does not say the key is set from $CORRAL_API_KEY:\n%s", out)
	}
	if out := corral("serve", "-h"); !strings.Contains(out, "postgres://corral:xxxxx@127.0.0.1:1/db?password=xxxxx") {
		t.Errorf("serve -h does not show the store URL redacted:\n%s", out)
	}
}

// TestCLIErrors: a bad flag's error is the last thing printed, with a line naming -h, not above the whole
// usage; a URL mistake is said in words: what is wanted, which server could not be reached.
func TestCLIErrors(t *testing.T) {
	t.Parallel()
	call := func(args ...string) (string, int) {
		var out, errb bytes.Buffer
		code := run(context.Background(), &stdio{out: &out, err: &errb}, args)
		return out.String() + errb.String(), code
	}
	for _, args := range [][]string{{"serve", "--bogus"}, {"agents", "create", "--name"}, {"worker", "--sandbox-uids", "x"}} {
		out, code := call(args...)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if code == 0 || len(lines) != 2 || !strings.Contains(lines[0], "flag") || !strings.HasSuffix(lines[1], " -h' for its flags.") {
			t.Errorf("corral %s: exit %d, want the error and one line naming -h:\n%s", strings.Join(args, " "), code, out)
		}
	}
	for _, c := range []struct{ url, want string }{
		{"localhost:8080", "did you mean http://localhost:8080?"},
		{"ftp://host", "want http://HOST:PORT or https://HOST"},
		{"http://127.0.0.1:1", "cannot reach the server at http://127.0.0.1:1 (connect: connection refused): is corral serve running there?"},
		{"http://user:secret-pw@127.0.0.1:1/v1", "cannot reach the server at http://127.0.0.1:1 "},
	} {
		out, code := call("agents", "list", "--url", c.url, "--key", "k")
		if code == 0 || !strings.Contains(out, c.want) || strings.Contains(out, "secret-pw") || strings.Contains(out, "dial tcp") {
			t.Errorf("agents list --url %s: exit %d, %q; want %q, in words", c.url, code, out, c.want)
		}
	}
}

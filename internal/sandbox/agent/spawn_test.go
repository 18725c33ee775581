package agent

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestSpawnRefuses: a request that is empty, not JSON, names no program or asks for root is refused.
func TestSpawnRefuses(t *testing.T) {
	for name, tc := range map[string]struct{ req, want string }{
		"no request": {"", "no request"},
		"not JSON":   {"{", "unexpected end of JSON input"},
		"no program": {`{"args":["x"],"uid":1000,"gid":1000}`, "incomplete request"},
		"root":       {`{"path":"/bin/true","args":["true"],"uid":0,"gid":0}`, "incomplete request"},
		"root group": {`{"path":"/bin/true","args":["true"],"uid":1000,"gid":0}`, "incomplete request"},
	} {
		if _, err := parseSpawn([]byte(tc.req)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: parseSpawn = %v, want an error with %q", name, err, tc.want)
		}
	}
	req, err := parseSpawn([]byte(`{"path":"/usr/bin/bwrap","args":["bwrap"],"env":["A=b"],"uid":200001,"gid":200001}`))
	if err != nil || req.Path != "/usr/bin/bwrap" || req.UID != 200001 || len(req.Env) != 1 {
		t.Errorf("parseSpawn of a whole request = %+v, %v", req, err)
	}
}

// TestSpawnEndOfInput: at the end of its pipe with no request (the server gone, or the start dropped) a start
// kept ready exits with an error, still the process it was.
func TestSpawnEndOfInput(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	fd, err := syscall.Dup(int(r.Fd()))
	r.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := runSpawn([]string{strconv.Itoa(fd)}); err == nil || !strings.Contains(err.Error(), "no request") {
		t.Errorf("runSpawn at end of input = %v, want no request", err)
	}
	for _, args := range [][]string{nil, {"1"}, {"x"}} {
		if err := runSpawn(args); err == nil {
			t.Errorf("runSpawn(%q): no error", args)
		}
	}
}

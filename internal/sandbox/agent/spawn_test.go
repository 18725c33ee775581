package agent

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestSpawnRefuses: a start kept ready whose request pipe ends with no request, or with one that is not
// JSON, that names no program, or that asks for root, exits with an error and becomes nothing.
func TestSpawnRefuses(t *testing.T) {
	for name, tc := range map[string]struct{ req, want string }{
		"no request": {"", "no request"},
		"not JSON":   {"{", "unexpected end of JSON input"},
		"no program": {`{"args":["x"],"uid":1000,"gid":1000}`, "incomplete request"},
		"root":       {`{"path":"/bin/true","args":["true"],"uid":0,"gid":0}`, "incomplete request"},
	} {
		t.Run(name, func(t *testing.T) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.WriteString(tc.req); err != nil {
				t.Fatal(err)
			}
			w.Close()
			err = runSpawn([]string{strconv.Itoa(int(r.Fd()))})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("runSpawn = %v, want an error with %q", err, tc.want)
			}
		})
	}
	if err := runSpawn([]string{"1"}); err == nil {
		t.Error("runSpawn on stdout: no error")
	}
	if err := runSpawn(nil); err == nil {
		t.Error("runSpawn with no descriptor: no error")
	}
}

package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"strings"
	"testing"
)

// TestLogFormat: --log-format json writes one JSON object per line with the attributes as keys, text writes
// slog text, and anything else is refused with the flag named.
func TestLogFormat(t *testing.T) {
	for _, c := range []struct {
		args []string
		json bool
	}{{nil, false}, {[]string{"--log-format", "text"}, false}, {[]string{"--log-format", "json"}, true}} {
		var lf logFlags
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		lf.register(fs)
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		logger, err := lf.logger(&stdio{out: io.Discard, err: &buf})
		if err != nil {
			t.Fatal(err)
		}
		logger.Info("sandbox provisioned", "session", "sesn_x")
		var rec map[string]any
		isJSON := json.Unmarshal(buf.Bytes(), &rec) == nil
		if isJSON != c.json {
			t.Errorf("%v: JSON = %v, want %v: %s", c.args, isJSON, c.json, buf.String())
		}
		if c.json && (rec["session"] != "sesn_x" || rec["msg"] != "sandbox provisioned") {
			t.Errorf("%v: record = %v", c.args, rec)
		}
		if !c.json && !strings.Contains(buf.String(), "session=sesn_x") {
			t.Errorf("%v: text line = %q", c.args, buf.String())
		}
	}
	lf := logFlags{format: "yaml"}
	if _, err := lf.logger(&stdio{out: io.Discard, err: io.Discard}); err == nil || !strings.Contains(err.Error(), "--log-format") {
		t.Errorf("--log-format yaml: err = %v, want a refusal naming the flag", err)
	}
}

package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/client"
)

// TestTailImageWait: a provisioning that waits for its image's build says so in tail's line, not nothing (a
// first start's base takes minutes); one whose image is built says nothing more.
func TestTailImageWait(t *testing.T) {
	t.Parallel()
	line := func(raw string) string {
		t.Helper()
		var ev client.Event
		if err := json.Unmarshal([]byte(raw), &ev); err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		(&tailer{out: &out}).print(&ev)
		return out.String()
	}
	waiting := line(`{"id":"sevt_1","type":"span.sandbox_provision_start","backend":"bwrap","image":{"id":"base-abc","status":"building"}}`)
	if !strings.Contains(waiting, "span.sandbox_provision_start") || !strings.Contains(waiting, "waiting for the image base-abc to build") {
		t.Errorf("a wait for a build: %q", waiting)
	}
	if built := line(`{"id":"sevt_2","type":"span.sandbox_provision_start","backend":"bwrap"}`); strings.Contains(built, "waiting") {
		t.Errorf("no build to wait for: %q", built)
	}
}

package harness

import (
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/apitype"
)

// TestMemoryNote: the system prompt names each memory store the session mounts, where, with its access, name,
// description and instructions, and says the files persist across sessions; a session without any has no note.
func TestMemoryNote(t *testing.T) {
	if got := memoryNote([]apitype.Resource{{Type: apitype.ResourceFile, FileID: "file_x"}}); got != "" {
		t.Errorf("no memory store: %q", got)
	}
	got := memoryNote([]apitype.Resource{
		{Type: apitype.ResourceMemoryStore, MemoryStoreID: "memstore_a", Name: "Team Notes", Description: "what the team learnt",
			Access: apitype.AccessReadWrite, MountPath: "/mnt/memory/team-notes", Instructions: "Keep one file per customer.\nBe brief."},
		{Type: apitype.ResourceMemoryStore, MemoryStoreID: "memstore_b", Name: "Style", Access: apitype.AccessReadOnly},
	})
	for _, want := range []string{
		"persist across sessions",
		"- /mnt/memory/team-notes (read-write): Team Notes — what the team learnt\n  Instructions for this store: Keep one file per customer.\n  Be brief.",
		"- /mnt/memory/style (read-only): Style",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("note lacks %q:\n%s", want, got)
		}
	}
}

package api

import "testing"

// TestRelaySlots: a work item holds at most maxRelayPerItem relayed git requests at once and the server
// maxRelay; a released slot is free again, and an item with none left takes no memory.
func TestRelaySlots(t *testing.T) {
	var r relaySlots
	var rel []func()
	for i := range maxRelayPerItem {
		release, ok := r.take("work_a")
		if !ok {
			t.Fatalf("slot %d of work_a refused", i)
		}
		rel = append(rel, release)
	}
	if _, ok := r.take("work_a"); ok {
		t.Fatalf("work_a took a slot past %d", maxRelayPerItem)
	}
	rel[0]()
	if release, ok := r.take("work_a"); !ok {
		t.Fatal("a released slot is not free again")
	} else {
		rel[0] = release
	}
	for i := range maxRelay - maxRelayPerItem {
		release, ok := r.take("work_" + string(rune('b'+i/maxRelayPerItem)) + string(rune('0'+i%maxRelayPerItem)))
		if !ok {
			t.Fatalf("server slot %d refused", i)
		}
		rel = append(rel, release)
	}
	if _, ok := r.take("work_new"); ok {
		t.Fatalf("a slot past the server's %d", maxRelay)
	}
	for _, release := range rel {
		release()
	}
	if r.total != 0 || len(r.byItem) != 0 {
		t.Errorf("after every release: total %d, %d items kept", r.total, len(r.byItem))
	}
}

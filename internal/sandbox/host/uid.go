package host

import (
	"fmt"
	"hash/fnv"
	"sync"
)

// uids are the host uids handed to live sandboxes by every provider of this process.
var uids struct {
	sync.Mutex
	inUse map[int]bool
}

// AllocUID returns a host uid from [base, base+count) that no live sandbox of this process uses. It prefers
// the uid key (a session id) hashes to, so that a session's next sandbox usually gets the uid its workspace
// already belongs to and need not re-own it. A uid another Corral process on the host holds is skipped
// (claimUID, uidclaim.go), whatever ranges the processes were given.
func AllocUID(base, count int, key string) (int, error) {
	uids.Lock()
	defer uids.Unlock()
	if uids.inUse == nil {
		uids.inUse = map[int]bool{}
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	start := int(h.Sum32() % uint32(count))
	for i := range count {
		uid := base + (start+i)%count
		if !uids.inUse[uid] && claimUID(uid) { // claimUID: no other process on the host has it (uidclaim.go)
			uids.inUse[uid] = true
			return uid, nil
		}
	}
	return 0, fmt.Errorf("all %d sandbox uids from %d are in use", count, base)
}

// FreeUID returns a uid taken with AllocUID.
func FreeUID(uid int) {
	uids.Lock()
	defer uids.Unlock()
	delete(uids.inUse, uid)
	releaseUID(uid)
}

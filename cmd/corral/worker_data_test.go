package main

import "testing"

// TestWorkerData: a worker's state goes to $CORRAL_WORKER_DATA; else, as root, /var/lib/corral-worker; else
// $XDG_STATE_HOME/corral-worker (an absolute one), else ~/.local/state/corral-worker.
func TestWorkerData(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env  map[string]string
		euid int
		want string
	}{
		{map[string]string{"CORRAL_WORKER_DATA": "/srv/w", "HOME": "/home/u"}, 0, "/srv/w"},
		{map[string]string{"CORRAL_WORKER_DATA": "/srv/w", "HOME": "/home/u"}, 1000, "/srv/w"},
		{map[string]string{"HOME": "/root", "XDG_STATE_HOME": "/x"}, 0, "/var/lib/corral-worker"},
		{map[string]string{"HOME": "/home/u", "XDG_STATE_HOME": "/x/state"}, 1000, "/x/state/corral-worker"},
		{map[string]string{"HOME": "/home/u", "XDG_STATE_HOME": "relative"}, 1000, "/home/u/.local/state/corral-worker"},
		{map[string]string{"HOME": "/home/u"}, 1000, "/home/u/.local/state/corral-worker"},
		{map[string]string{}, 1000, "corral-worker"},
	} {
		if got := workerData(func(k string) string { return c.env[k] }, c.euid); got != c.want {
			t.Errorf("%v, euid %d: %s, want %s", c.env, c.euid, got, c.want)
		}
	}
}

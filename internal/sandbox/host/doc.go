// Package host is the host kit the local sandbox backends (bwrap, oci, gvisor, process) share: everything that
// happens on the server's side of a sandbox. Stage claims a sandbox's uid and state directory and stages what
// it runs with (the workspace and session directories of its sandbox.HostDirs given to the uid, the image root,
// the CA bundle, the session mounts, the egress listener) in one call, and its Staged.Release undoes it; Client speaks the host's
// half of the agent's JSON-lines protocol (package agent) and Sandbox puts sandbox.Sandbox on a started agent.
//
// The uid allocation lives in uid.go (AllocUID, FreeUID: one process's claims for now), and every mount staged
// on the host for a sandbox is made by mount.go (BindMount, MountTmp, the image binds) from the paths Stage and
// SessionMounts choose: the one place each to change. Nothing that runs inside a sandbox links this package
// (internal/archtest enforces it).
package host

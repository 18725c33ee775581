package bwrap

// KeepsStartsReady reports whether p keeps starts ready (Config.Warm, and an agent with the spawn mode).
func KeepsStartsReady(p *Provider) bool { return p.warm != nil }

// BreakStartsReady closes the host's end of each ready start's argument pipe, so that taking it fails before its
// parked process is told anything (as when it dies between take and claim), and returns how many it broke.
func BreakStartsReady(p *Provider) int {
	p.warm.mu.Lock()
	defer p.warm.mu.Unlock()
	for _, w := range p.warm.ready {
		w.argsW.Close()
	}
	return len(p.warm.ready)
}

package bwrap

// KeepsStartsReady reports whether p keeps starts ready (Config.Warm, and an agent with the spawn mode).
func KeepsStartsReady(p *Provider) bool { return p.warm != nil }

package kubernetes

// Abandon leaves the provider as a SIGKILL of its server would: its keeper stops and its streams and proxies
// close, but nothing it made on the cluster is deleted.
func Abandon(p *Provider) {
	p.mu.Lock()
	p.closed = true
	live := p.live
	p.live = nil
	p.mu.Unlock()
	close(p.stop)
	<-p.done
	for _, sb := range live {
		sb.created = false // its Close must not delete the pod
		_ = sb.Close()
	}
	_ = p.canary.Close()
}

// This file scrubs secrets from the text the MCP proxy reports.

package proxy

import "strings"

// scrubAll replaces every secret of at least four bytes in s.
func scrubAll(s string, secrets []string) string {
	for _, v := range secrets {
		if len(v) >= 4 {
			s = strings.ReplaceAll(s, v, "[redacted]")
		}
	}
	return s
}

// scrubBody returns at most limit bytes of body with every secret replaced, and whether it was cut. The secrets
// are replaced before the cut, so that one straddling the limit is not left half visible; and a cut body that
// ends with the beginning of a secret (its rest beyond what was read) loses that beginning too.
func scrubBody(body []byte, limit int, secrets []string) (string, bool) {
	s := scrubAll(string(body), secrets)
	if len(s) <= limit && len(body) <= limit {
		return s, false
	}
	s = s[:min(limit, len(s))]
	for _, v := range secrets {
		if len(v) < 4 {
			continue
		}
		for k := min(len(v)-1, len(s)); k > 0; k-- {
			if strings.HasSuffix(s, v[:k]) {
				s = s[:len(s)-k]
				break
			}
		}
	}
	return s, true
}

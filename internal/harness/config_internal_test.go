package harness

import (
	"testing"
	"time"
)

// TestConfigDefaults: a zero field takes the exported default the flags of cmd/ use.
func TestConfigDefaults(t *testing.T) {
	var c Config
	c.setDefaults()
	for name, tc := range map[string]struct{ got, want any }{
		"Workers":          {c.Workers, DefaultWorkers()},
		"LeaseTTL":         {c.LeaseTTL, DefaultLeaseTTL},
		"PollInterval":     {c.PollInterval, DefaultPollInterval},
		"ContextTokens":    {c.ContextTokens, DefaultContextTokens},
		"CompactAt":        {c.CompactAt, DefaultCompactAt},
		"ModelTimeout":     {c.ModelTimeout, DefaultModelTimeout},
		"MaxTokens":        {c.MaxTokens, DefaultMaxTokens},
		"PreviewInterval":  {c.PreviewInterval, DefaultPreviewInterval},
		"Retry.MaxRetries": {c.Retry.MaxRetries, DefaultMaxRetries},
		"Retry.BaseDelay":  {c.Retry.BaseDelay, DefaultRetryBaseDelay},
		"Retry.MaxDelay":   {c.Retry.MaxDelay, DefaultRetryMaxDelay},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %v, want %v", name, tc.got, tc.want)
		}
	}
	if DefaultLeaseTTL != 5*time.Second {
		t.Errorf("DefaultLeaseTTL = %v, want the 5s that corral serve --lease-ttl advertises", DefaultLeaseTTL)
	}
	if c.Owner == "" {
		t.Error("no default Owner")
	}
	// Set fields are kept; a negative MaxRetries means none.
	c = Config{LeaseTTL: time.Minute, Workers: 3, Retry: RetryPolicy{MaxRetries: -1}}
	c.setDefaults()
	if c.LeaseTTL != time.Minute || c.Workers != 3 || c.Retry.MaxRetries != 0 {
		t.Errorf("set fields changed: %+v", c)
	}
}

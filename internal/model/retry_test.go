package model_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/model"
)

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cases := []struct {
		headers map[string]string
		want    time.Duration
	}{
		{nil, 0},
		{map[string]string{"retry-after": "3"}, 3 * time.Second},
		{map[string]string{"retry-after": "0.5"}, 500 * time.Millisecond},
		{map[string]string{"retry-after-ms": "1500", "retry-after": "2"}, 1500 * time.Millisecond},
		{map[string]string{"retry-after-ms": "junk", "retry-after": "2"}, 2 * time.Second},
		{map[string]string{"retry-after": now.Add(10 * time.Second).Format(http.TimeFormat)}, 10 * time.Second},
		{map[string]string{"retry-after": now.Add(-time.Minute).Format(http.TimeFormat)}, 0},
		{map[string]string{"retry-after": "-1"}, 0},
		{map[string]string{"retry-after": "soon"}, 0},
	}
	for _, c := range cases {
		h := http.Header{}
		for k, v := range c.headers {
			h.Set(k, v)
		}
		if got := model.RetryAfter(h, now); got != c.want {
			t.Errorf("RetryAfter(%v) = %v, want %v", c.headers, got, c.want)
		}
	}
}

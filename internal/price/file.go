package price

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
)

type rateError string

func (e rateError) Error() string {
	return fmt.Sprintf("price %q: want a non-negative number of US dollars per million tokens with at most six decimals", string(e))
}

func errRate(s string) error { return rateError(s) }

// fileRates is one model's entry of a prices file, each rate in US dollars per million tokens (a JSON number or
// a string of one).
type fileRates struct {
	Input        fileRate `json:"input"`
	Output       fileRate `json:"output"`
	CacheWrite5m fileRate `json:"cache_write_5m"`
	CacheWrite1h fileRate `json:"cache_write_1h"`
	CacheRead    fileRate `json:"cache_read"`
	// DisplayName is the model's name for people in GET /v1/models (default: its id).
	DisplayName string `json:"display_name"`
}

// fileRate is a rate as the file writes it: a JSON number or a string, kept as its text and parsed exactly.
type fileRate string

func (r *fileRate) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*r = fileRate(s)
		return nil
	}
	*r = fileRate(b)
	return nil
}

// Load is the built-in table with the entries of the operator's prices file (--prices) added, an entry of the
// file replacing a built-in one of the same model id.
//
// The file is a JSON object:
//
//	{"models": {"openai/gpt-4o": {"input": "2.50", "output": "10", "cache_read": "1.25", "display_name": "GPT-4o"}}}
//
// keyed by the model id as agents name it, each rate in US dollars per million tokens; display_name, optional,
// names the model in GET /v1/models. input and output are
// required; a cache rate left out is priced as input, so a cost is never under the list price for want of one.
func Load(path string) (*Table, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("prices file: %w", err)
	}
	t, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("prices file %s: %w", path, err)
	}
	return t, nil
}

// Parse is Load on the file's contents.
func Parse(data []byte) (*Table, error) {
	var f struct {
		Models map[string]fileRates `json:"models"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("not a prices object {\"models\": {...}}: %w", err)
	}
	if dec.More() {
		return nil, errors.New("trailing data after the prices object")
	}
	if len(f.Models) == 0 {
		return nil, errors.New(`no models: want {"models": {"<model id>": {"input": ..., "output": ...}}}`)
	}
	t := Default()
	ids := make([]string, 0, len(f.Models))
	for id := range f.Models {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		fr := f.Models[id]
		if strings.TrimSpace(id) == "" {
			return nil, errors.New("a model with an empty id")
		}
		if fr.Input == "" || fr.Output == "" {
			return nil, fmt.Errorf("model %q: input and output are required", id)
		}
		var r Rates
		var err error
		for _, x := range []struct {
			name string
			in   fileRate
			out  *Pico
		}{{"input", fr.Input, &r.Input}, {"output", fr.Output, &r.Output}, {"cache_write_5m", fr.CacheWrite5m, &r.CacheWrite5m},
			{"cache_write_1h", fr.CacheWrite1h, &r.CacheWrite1h}, {"cache_read", fr.CacheRead, &r.CacheRead}} {
			if x.in == "" {
				*x.out = r.Input
				continue
			}
			if *x.out, err = parseRate(string(x.in)); err != nil {
				return nil, fmt.Errorf("model %q: %s: %w", id, x.name, err)
			}
		}
		t.rates[id] = r
		if fr.DisplayName != "" {
			if t.names == nil {
				t.names = map[string]string{}
			}
			t.names[id] = fr.DisplayName
		}
	}
	return t, nil
}
